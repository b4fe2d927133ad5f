/* The tpusim PJRT plugin's buffers: dense row-major arrays in host memory, one per device
 * (the simulated chip's HBM is the host's). Copies in and out complete inside the call. */
#include <math.h>
#include <string.h>

#include "base/alloc.h"
#include "pjrt/pjrt_int.h"

/* ORDER: PJRT_T_* (PRED .. C128) -> tpu_sim_dtype. */
static const int to_dtype[] = {
    -1,            TPU_SIM_PRED, TPU_SIM_S8,  TPU_SIM_S16, TPU_SIM_S32, TPU_SIM_S64,
    TPU_SIM_U8,    TPU_SIM_U16,  TPU_SIM_U32, TPU_SIM_U64, TPU_SIM_F16, TPU_SIM_F32,
    TPU_SIM_F64,   TPU_SIM_BF16, TPU_SIM_C64, TPU_SIM_C128,
    TPU_SIM_F32,   TPU_SIM_F32}; /* F8E5M2, F8E4M3FN: run as f32 */

int tpu__pjrt_to_dtype(int t) {
  return t > 0 && t < (int)(sizeof to_dtype / sizeof *to_dtype) ? to_dtype[t] : -1;
}

int tpu__pjrt_is_f8(int t) { return t == PJRT_T_F8E5M2 || t == PJRT_T_F8E4M3FN; }

size_t tpu__pjrt_type_size(int t) {
  if (tpu__pjrt_is_f8(t)) return 1;
  int dt = tpu__pjrt_to_dtype(t);
  return dt < 0 ? 0 : tpu_sim_dtype_size(dt);
}

/* Format of a float8 type: mantissa bits and exponent bias. */
static void f8_format(int t, int *mbits, int *bias) {
  *mbits = t == PJRT_T_F8E4M3FN ? 3 : 2;
  *bias = t == PJRT_T_F8E4M3FN ? 7 : 15;
}

float tpu__pjrt_f8_to_f32(int t, unsigned char v) {
  int mb, bias;
  f8_format(t, &mb, &bias);
  int e = (v & 0x7F) >> mb, m = v & ((1 << mb) - 1);
  float sign = v & 0x80 ? -1.0f : 1.0f;
  if (t == PJRT_T_F8E4M3FN && (v & 0x7F) == 0x7F) return NAN;
  if (t == PJRT_T_F8E5M2 && e == 31) return m ? NAN : sign * INFINITY;
  if (e == 0) return sign * ldexpf((float)m, 1 - bias - mb);
  return sign * ldexpf((float)((1 << mb) + m), e - bias - mb);
}

unsigned char tpu__pjrt_f8_from_f32(int t, float x) {
  int mb, bias;
  f8_format(t, &mb, &bias);
  int e4 = t == PJRT_T_F8E4M3FN;
  unsigned char sign = signbit(x) ? 0x80 : 0;
  unsigned char nan = e4 ? 0x7F : 0x7E, inf = e4 ? 0x7F : 0x7C; /* e4m3fn: no infinity */
  if (isnan(x)) return sign | nan;
  float a = fabsf(x);
  if (isinf(a)) return sign | inf;
  int e;
  frexpf(a, &e); /* a = f * 2^e, f in [0.5, 1) */
  int exp = e - 1 + bias; /* the biased exponent of 1.m form */
  if (a == 0.0f) return sign;
  if (exp < 1) { /* subnormal: a multiple of 2^(1 - bias - mb), rounded to nearest even */
    int q = (int)rintf(ldexpf(a, bias - 1 + mb));
    return (unsigned char)(sign | q); /* q == 2^mb carries into the smallest normal */
  }
  int q = (int)rintf(ldexpf(a, mb - (e - 1))) - (1 << mb); /* mantissa, rounded */
  if (q == (1 << mb)) {
    q = 0;
    exp++;
  }
  int code = (exp << mb) | q;
  if (e4 ? code > 0x7E : exp >= 31) return sign | inf;
  return (unsigned char)(sign | code);
}

int tpu__pjrt_from_dtype(int dtype) {
  for (int t = 1; t < (int)(sizeof to_dtype / sizeof *to_dtype); t++)
    if (to_dtype[t] == dtype) return t;
  return -1;
}

PJRT_Buffer *tpu__pjrt_buffer_new(PJRT_Device *dev, int type, int rank, const int64_t *dims) {
  size_t n = tpu__pjrt_type_size(type);
  if (!n || rank < 0 || rank > TPU_SIM_MAX_RANK) return NULL;
  for (int i = 0; i < rank; i++) {
    if (dims[i] < 0 || !tpu_mul_ok(n, (size_t)dims[i], &n)) return NULL;
  }
  PJRT_Buffer *b = tpu_calloc(1, sizeof *b);
  if (!b) return NULL;
  b->device = dev;
  b->type = type;
  b->rank = rank;
  memcpy(b->dims, dims, (size_t)rank * sizeof *dims);
  for (int i = 0; i < rank; i++) b->minor_to_major[i] = rank - 1 - i;
  b->nbytes = n;
  if (n && !(b->data = tpu_malloc(n))) {
    tpu_free(b);
    return NULL;
  }
  return b;
}

static PJRT_Error *no_buffer(const char *what, int type, int rank) {
  return tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT,
                         "%s: cannot make a buffer of element type %d and rank %d (a type tpusim "
                         "has no counterpart for, a bad shape, or out of memory)",
                         what, type, rank);
}

/* Copies a strided host array into dense `dst`, one innermost row at a time. */
static void gather_strided(char *dst, const char *src, int rank, const int64_t *dims,
                           const int64_t *strides, size_t esize) {
  if (rank == 0) {
    memcpy(dst, src, esize);
    return;
  }
  int64_t idx[TPU_SIM_MAX_RANK] = {0};
  size_t row = (size_t)dims[rank - 1] * esize;
  for (;;) {
    const char *s = src;
    for (int i = 0; i < rank - 1; i++) s += idx[i] * strides[i];
    if (strides[rank - 1] == (int64_t)esize) {
      memcpy(dst, s, row);
    } else {
      for (int64_t j = 0; j < dims[rank - 1]; j++) memcpy(dst + j * esize, s + j * strides[rank - 1], esize);
    }
    dst += row;
    int k = rank - 2;
    while (k >= 0 && ++idx[k] == dims[k]) idx[k--] = 0;
    if (k < 0) break;
  }
}

static PJRT_Error *from_host(PJRT_Client_BufferFromHostBuffer_Args *a) {
  PJRT_Device *dev = a->device;
  if (a->memory) dev = a->memory->device;
  if (!dev) dev = a->client->device_ptrs[0];
  if (a->device_layout && !(a->device_layout->type == 0 && a->device_layout->tiled.num_tiles == 0))
    return tpu__pjrt_error(PJRT_Error_Code_UNIMPLEMENTED, "BufferFromHostBuffer: only dense device layouts");
  PJRT_Buffer *b = tpu__pjrt_buffer_new(dev, a->type, (int)a->num_dims, a->dims);
  if (!b) return no_buffer("BufferFromHostBuffer", a->type, (int)a->num_dims);
  size_t esize = tpu__pjrt_type_size(a->type);
  int dense = 1;
  if (a->num_byte_strides && b->nbytes) {
    int64_t expect = (int64_t)esize;
    for (int i = (int)a->num_dims - 1; i >= 0; i--) {
      if (a->dims[i] != 1 && a->byte_strides[i] != expect) dense = 0;
      expect *= a->dims[i];
    }
  }
  if (b->nbytes) {
    if (dense) memcpy(b->data, a->data, b->nbytes);
    else gather_strided(b->data, a->data, b->rank, b->dims, a->byte_strides, esize);
  }
  a->done_with_host_buffer = tpu__pjrt_event(PJRT_Error_Code_OK, NULL);
  a->buffer = b;
  return NULL;
}

static PJRT_Error *buffer_destroy(PJRT_Buffer_Args *a) {
  if (a->buffer) {
    tpu_free(a->buffer->data);
    tpu_free(a->buffer);
  }
  return NULL;
}

static PJRT_Error *buffer_delete(PJRT_Buffer_Args *a) {
  tpu_free(a->buffer->data);
  a->buffer->data = NULL;
  a->buffer->deleted = 1;
  return NULL;
}

static PJRT_Error *buffer_is_deleted(PJRT_Buffer_Bool_Args *a) {
  a->value = a->buffer->deleted;
  return NULL;
}

static PJRT_Error *buffer_is_on_cpu(PJRT_Buffer_Bool_Args *a) {
  a->value = false; /* host memory, but not XLA:CPU's buffers: no zero-copy views */
  return NULL;
}

static PJRT_Error *buffer_type(PJRT_Buffer_ElementType_Args *a) {
  a->type = a->buffer->type;
  return NULL;
}

static PJRT_Error *buffer_dims(PJRT_Buffer_Dimensions_Args *a) {
  a->dims = a->buffer->dims;
  a->num_dims = (size_t)a->buffer->rank;
  return NULL;
}

static PJRT_Error *buffer_dynamic_dims(PJRT_Buffer_DynamicDimensionIndices_Args *a) {
  a->dynamic_dim_indices = NULL;
  a->num_dynamic_dims = 0;
  return NULL;
}

static PJRT_Error *buffer_layout(PJRT_Buffer_GetMemoryLayout_Args *a) {
  memset(&a->layout, 0, sizeof a->layout);
  a->layout.struct_size = sizeof a->layout;
  a->layout.type = 0; /* tiled, without tiles: dense, major to minor */
  a->layout.tiled.struct_size = sizeof a->layout.tiled;
  a->layout.tiled.minor_to_major = a->buffer->minor_to_major;
  a->layout.tiled.minor_to_major_size = (size_t)a->buffer->rank;
  return NULL;
}

static PJRT_Error *buffer_size(PJRT_Buffer_OnDeviceSizeInBytes_Args *a) {
  a->on_device_size_in_bytes = a->buffer->nbytes;
  return NULL;
}

static PJRT_Error *buffer_device(PJRT_Buffer_Device_Args *a) {
  a->device = a->buffer->device;
  return NULL;
}

static PJRT_Error *buffer_memory(PJRT_Buffer_Memory_Args *a) {
  a->memory = &a->buffer->device->memory;
  return NULL;
}

static PJRT_Error *buffer_ready(PJRT_Buffer_ReadyEvent_Args *a) {
  a->event = a->buffer->deleted ? tpu__pjrt_event(PJRT_Error_Code_FAILED_PRECONDITION,
                                                  "tpusim PJRT: the buffer was deleted")
                                : tpu__pjrt_event(PJRT_Error_Code_OK, NULL);
  return NULL;
}

static PJRT_Error *buffer_pointer(PJRT_Buffer_UnsafePointer_Args *a) {
  a->buffer_pointer = (uintptr_t)a->buffer->data;
  return NULL;
}

static PJRT_Error *buffer_opaque_pointer(PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args *a) {
  a->device_memory_ptr = a->buffer->data;
  return NULL;
}

static PJRT_Error *buffer_refcount(PJRT_Buffer_Args *a) { return NULL; }

static int dense_layout(const PJRT_Buffer_MemoryLayout *l, int rank) {
  if (!l) return 1;
  if (l->type != 0 || l->tiled.num_tiles != 0 || l->tiled.minor_to_major_size != (size_t)rank) return 0;
  for (int i = 0; i < rank; i++)
    if (l->tiled.minor_to_major[i] != rank - 1 - i) return 0;
  return 1;
}

static PJRT_Error *buffer_to_host(PJRT_Buffer_ToHostBuffer_Args *a) {
  PJRT_Buffer *b = a->src;
  if (!a->dst) {
    a->dst_size = b->nbytes;
    return NULL;
  }
  if (b->deleted) return tpu__pjrt_error(PJRT_Error_Code_FAILED_PRECONDITION, "ToHostBuffer: the buffer was deleted");
  if (!dense_layout(a->host_layout, b->rank))
    return tpu__pjrt_error(PJRT_Error_Code_UNIMPLEMENTED, "ToHostBuffer: only dense row-major host layouts");
  if (a->dst_size < b->nbytes)
    return tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT, "ToHostBuffer: %zu bytes given, %zu needed",
                           a->dst_size, b->nbytes);
  if (b->nbytes) memcpy(a->dst, b->data, b->nbytes);
  a->event = tpu__pjrt_event(PJRT_Error_Code_OK, NULL);
  return NULL;
}

static PJRT_Error *buffer_copy_raw(PJRT_Buffer_CopyRawToHost_Args *a) {
  PJRT_Buffer *b = a->buffer;
  if (b->deleted || a->offset < 0 || a->transfer_size < 0 || (uint64_t)a->offset + (uint64_t)a->transfer_size > b->nbytes)
    return tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT, "CopyRawToHost: out of range or deleted");
  if (a->transfer_size) memcpy(a->dst, (char *)b->data + a->offset, (size_t)a->transfer_size);
  a->event = tpu__pjrt_event(PJRT_Error_Code_OK, NULL);
  return NULL;
}

static PJRT_Error *copy_to(PJRT_Buffer *src, PJRT_Device *dev, PJRT_Buffer **out) {
  if (src->deleted) return tpu__pjrt_error(PJRT_Error_Code_FAILED_PRECONDITION, "copy: the buffer was deleted");
  PJRT_Buffer *b = tpu__pjrt_buffer_new(dev, src->type, src->rank, src->dims);
  if (!b) return no_buffer("copy", src->type, src->rank);
  if (b->nbytes) memcpy(b->data, src->data, b->nbytes);
  *out = b;
  return NULL;
}

static PJRT_Error *buffer_copy_to_device(PJRT_Buffer_CopyToDevice_Args *a) {
  return copy_to(a->buffer, a->dst_device, &a->dst_buffer);
}

static PJRT_Error *buffer_copy_to_memory(PJRT_Buffer_CopyToMemory_Args *a) {
  return copy_to(a->buffer, a->dst_memory->device, &a->dst_buffer);
}

void tpu__pjrt_install_buffer(PJRT_Api *api) {
#define SET(slot, fn) api->slot = (pjrt_fn)(void (*)(void))(fn)
  SET(PJRT_Client_BufferFromHostBuffer, from_host);
  SET(PJRT_Buffer_Destroy, buffer_destroy);
  SET(PJRT_Buffer_Delete, buffer_delete);
  SET(PJRT_Buffer_IsDeleted, buffer_is_deleted);
  SET(PJRT_Buffer_IsOnCpu, buffer_is_on_cpu);
  SET(PJRT_Buffer_ElementType, buffer_type);
  SET(PJRT_Buffer_Dimensions, buffer_dims);
  SET(PJRT_Buffer_UnpaddedDimensions, buffer_dims);
  SET(PJRT_Buffer_DynamicDimensionIndices, buffer_dynamic_dims);
  SET(PJRT_Buffer_OnDeviceSizeInBytes, buffer_size);
  SET(PJRT_Buffer_GetMemoryLayout, buffer_layout);
  SET(PJRT_Buffer_Device, buffer_device);
  SET(PJRT_Buffer_Memory, buffer_memory);
  SET(PJRT_Buffer_ReadyEvent, buffer_ready);
  SET(PJRT_Buffer_UnsafePointer, buffer_pointer);
  SET(PJRT_Buffer_OpaqueDeviceMemoryDataPointer, buffer_opaque_pointer);
  SET(PJRT_Buffer_IncreaseExternalReferenceCount, buffer_refcount);
  SET(PJRT_Buffer_DecreaseExternalReferenceCount, buffer_refcount);
  SET(PJRT_Buffer_ToHostBuffer, buffer_to_host);
  SET(PJRT_Buffer_CopyRawToHost, buffer_copy_raw);
  SET(PJRT_Buffer_CopyToDevice, buffer_copy_to_device);
  SET(PJRT_Buffer_CopyToMemory, buffer_copy_to_memory);
#undef SET
}
