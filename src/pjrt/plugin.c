/* tpusim as a PJRT plugin (GetPjrtApi): errors, events, the client, its simulated devices
 * and their memories, and the PJRT_Api table. Buffers are in buffer.c, compile and execute
 * in exec.c. docs/pjrt.md lists the surface implemented. */
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "base/alloc.h"
#include "pjrt/pjrt_int.h"

pthread_mutex_t tpu__pjrt_lock = PTHREAD_MUTEX_INITIALIZER;

/* ---- errors ---- */

static PJRT_Error oom_error = {PJRT_Error_Code_RESOURCE_EXHAUSTED, NULL};
static const char oom_msg[] = "tpusim PJRT: out of memory";

PJRT_Error *tpu__pjrt_error(PJRT_Error_Code code, const char *fmt, ...) {
  char buf[1536];
  int n = snprintf(buf, sizeof buf, "tpusim PJRT: ");
  va_list ap;
  va_start(ap, fmt);
  vsnprintf(buf + n, sizeof buf - (size_t)n, fmt, ap);
  va_end(ap);
  PJRT_Error *e = tpu_malloc(sizeof *e);
  char *m = tpu_strdup(buf);
  if (!e || !m) {
    tpu_free(e);
    tpu_free(m);
    return &oom_error;
  }
  e->code = code;
  e->msg = m;
  return e;
}

PJRT_Error *tpu__pjrt_error_diag(const tpu_diag *d) {
  char buf[1200];
  tpu_diag_format(d, buf, sizeof buf);
  PJRT_Error_Code code = PJRT_Error_Code_INVALID_ARGUMENT;
  if (d->status == TPU_ERR_UNSUPPORTED) code = PJRT_Error_Code_UNIMPLEMENTED;
  if (d->status == TPU_ERR_NOMEM) code = PJRT_Error_Code_RESOURCE_EXHAUSTED;
  if (d->status == TPU_ERR_RUNTIME || d->status == TPU_ERR_IO) code = PJRT_Error_Code_INTERNAL;
  return tpu__pjrt_error(code, "%s", buf);
}

static void error_destroy(PJRT_Error_Destroy_Args *a) {
  if (!a->error || a->error == &oom_error) return;
  tpu_free(a->error->msg);
  tpu_free(a->error);
}

static void error_message(PJRT_Error_Message_Args *a) {
  const char *m = a->error->msg ? a->error->msg : oom_msg;
  a->message = m;
  a->message_size = strlen(m);
}

static PJRT_Error *error_getcode(PJRT_Error_GetCode_Args *a) {
  a->code = a->error->code;
  return NULL;
}

/* ---- events: always complete ---- */

PJRT_Event *tpu__pjrt_event(PJRT_Error_Code code, const char *msg) {
  PJRT_Event *ev = tpu_calloc(1, sizeof *ev);
  if (!ev) return NULL;
  ev->code = code;
  if (code != PJRT_Error_Code_OK) {
    ev->msg = tpu_strdup(msg ? msg : "error");
    if (!ev->msg) ev->code = PJRT_Error_Code_RESOURCE_EXHAUSTED;
  }
  return ev;
}

static PJRT_Error *event_outcome(const PJRT_Event *ev) {
  if (!ev || ev->code == PJRT_Error_Code_OK) return NULL;
  PJRT_Error *e = tpu_malloc(sizeof *e);
  char *m = tpu_strdup(ev->msg ? ev->msg : oom_msg);
  if (!e || !m) {
    tpu_free(e);
    tpu_free(m);
    return &oom_error;
  }
  e->code = ev->code;
  e->msg = m;
  return e;
}

static PJRT_Error *event_destroy(PJRT_Event_Args *a) {
  if (a->event) {
    tpu_free(a->event->msg);
    tpu_free(a->event);
  }
  return NULL;
}

static PJRT_Error *event_isready(PJRT_Event_IsReady_Args *a) {
  a->is_ready = true;
  return NULL;
}

static PJRT_Error *event_error(PJRT_Event_Args *a) { return event_outcome(a->event); }

static PJRT_Error *event_onready(PJRT_Event_OnReady_Args *a) {
  a->callback(event_outcome(a->event), a->user_arg);
  return NULL;
}

/* ---- plugin ---- */

static PJRT_Error *plugin_initialize(PJRT_Plugin_Initialize_Args *a) { return NULL; }

static PJRT_Error *plugin_attributes(PJRT_Plugin_Attributes_Args *a) {
  a->attributes = NULL;
  a->num_attributes = 0;
  return NULL;
}

/* ---- client ---- */

static void copy_option(char *dst, size_t n, const PJRT_NamedValue *v) {
  if (v->type != PJRT_NamedValue_kString) return;
  size_t k = v->value_size < n - 1 ? v->value_size : n - 1;
  memcpy(dst, v->string_value, k);
  dst[k] = 0;
}

static int option_is(const PJRT_NamedValue *v, const char *name) {
  return v->name_size == strlen(name) && memcmp(v->name, name, v->name_size) == 0;
}

static void client_free(PJRT_Client *c) {
  if (!c) return;
  tpu_free(c->devices);
  tpu_free(c->device_ptrs);
  tpu_free(c->memory_ptrs);
  tpu_free(c);
}

/* Options (all optional; the jax_plugins.tpusim module passes them from TPUSIM_* variables):
 * "chip" (string, default v5e), "topology" (string), "num_devices" (int64, default 1),
 * "backend" ("tpu" or "ref"), "precision" ("default", "high", "highest"). */
static PJRT_Error *client_create(PJRT_Client_Create_Args *a) {
  PJRT_Client *c = tpu_calloc(1, sizeof *c);
  if (!c) return &oom_error;
  snprintf(c->chip, sizeof c->chip, "v5e");
  snprintf(c->backend, sizeof c->backend, "tpu");
  snprintf(c->version, sizeof c->version, "tpusim %s", tpu_version());
  int64_t n = 1;
  for (size_t i = 0; i < a->num_options; i++) {
    const PJRT_NamedValue *v = &a->create_options[i];
    if (option_is(v, "chip")) copy_option(c->chip, sizeof c->chip, v);
    else if (option_is(v, "topology")) copy_option(c->topology, sizeof c->topology, v);
    else if (option_is(v, "backend")) copy_option(c->backend, sizeof c->backend, v);
    else if (option_is(v, "precision")) copy_option(c->precision, sizeof c->precision, v);
    else if (option_is(v, "num_devices") && v->type == PJRT_NamedValue_kInt64) n = v->int64_value;
  }
  if (n < 1 || n > 65536) {
    client_free(c);
    return tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT, "num_devices %lld is not in 1..65536",
                           (long long)n);
  }
  c->ndevices = (int)n;
  c->devices = tpu_calloc((size_t)n, sizeof *c->devices);
  c->device_ptrs = tpu_calloc((size_t)n, sizeof *c->device_ptrs);
  c->memory_ptrs = tpu_calloc((size_t)n, sizeof *c->memory_ptrs);
  if (!c->devices || !c->device_ptrs || !c->memory_ptrs) {
    client_free(c);
    return &oom_error;
  }
  const char *chip = strrchr(c->chip, '/') ? strrchr(c->chip, '/') + 1 : c->chip;
  int chiplen = (int)strlen(chip);
  if (chiplen > 5 && !strcmp(chip + chiplen - 5, ".json")) chiplen -= 5; /* "v5e.json": v5e */
  for (int i = 0; i < c->ndevices; i++) {
    PJRT_Device *d = &c->devices[i];
    d->client = c;
    d->desc.id = i;
    snprintf(d->desc.kind, sizeof d->desc.kind, "tpusim %.*s", chiplen < 48 ? chiplen : 48, chip);
    snprintf(d->desc.str, sizeof d->desc.str, "TpusimDevice(id=%d)", i);
    snprintf(d->desc.debug, sizeof d->desc.debug, "tpusim:%d (simulated %.*s)", i, chiplen < 64 ? chiplen : 64, chip);
    d->memory.id = i;
    d->memory.device = d;
    snprintf(d->memory.str, sizeof d->memory.str, "TpusimMemory(device=%d, kind=device)", i);
    d->memory_ptr = &d->memory;
    c->device_ptrs[i] = d;
    c->memory_ptrs[i] = &d->memory;
  }
  a->client = c;
  return NULL;
}

static PJRT_Error *client_destroy(PJRT_Client_Destroy_Args *a) {
  client_free(a->client);
  return NULL;
}

static PJRT_Error *client_platform_name(PJRT_Client_String_Args *a) {
  a->str = "tpusim";
  a->str_size = strlen(a->str);
  return NULL;
}

static PJRT_Error *client_platform_version(PJRT_Client_String_Args *a) {
  a->str = a->client->version;
  a->str_size = strlen(a->str);
  return NULL;
}

static PJRT_Error *client_process_index(PJRT_Client_ProcessIndex_Args *a) {
  a->process_index = 0;
  return NULL;
}

static PJRT_Error *client_devices(PJRT_Client_Devices_Args *a) {
  a->devices = a->client->device_ptrs;
  a->num_devices = (size_t)a->client->ndevices;
  return NULL;
}

static PJRT_Error *client_lookup_device(PJRT_Client_LookupDevice_Args *a) {
  if (a->id < 0 || a->id >= a->client->ndevices)
    return tpu__pjrt_error(PJRT_Error_Code_NOT_FOUND, "no device with id %d (the client has %d)",
                           a->id, a->client->ndevices);
  a->device = a->client->device_ptrs[a->id];
  return NULL;
}

static PJRT_Error *client_memories(PJRT_Client_AddressableMemories_Args *a) {
  a->memories = a->client->memory_ptrs;
  a->num_memories = (size_t)a->client->ndevices;
  return NULL;
}

static PJRT_Error *client_default_assignment(PJRT_Client_DefaultDeviceAssignment_Args *a) {
  int64_t n = (int64_t)a->num_replicas * a->num_partitions;
  if (n > a->client->ndevices || (size_t)n > a->default_assignment_size)
    return tpu__pjrt_error(PJRT_Error_Code_INVALID_ARGUMENT,
                           "%d replicas x %d partitions need more than the %d simulated devices "
                           "(set TPUSIM_TOPOLOGY or TPUSIM_DEVICES)",
                           a->num_replicas, a->num_partitions, a->client->ndevices);
  for (int64_t i = 0; i < n; i++) a->default_assignment[i] = (int)i;
  return NULL;
}

/* ---- device descriptions and devices ---- */

static PJRT_Error *desc_id(PJRT_DeviceDescription_Int_Args *a) {
  a->value = a->device_description->id;
  return NULL;
}

static PJRT_Error *desc_process_index(PJRT_DeviceDescription_Int_Args *a) {
  a->value = 0;
  return NULL;
}

static PJRT_Error *desc_attributes(PJRT_DeviceDescription_Attributes_Args *a) {
  a->num_attributes = 0;
  a->attributes = NULL;
  return NULL;
}

static PJRT_Error *desc_kind(PJRT_DeviceDescription_String_Args *a) {
  a->str = a->device_description->kind;
  a->str_size = strlen(a->str);
  return NULL;
}

static PJRT_Error *desc_debug(PJRT_DeviceDescription_String_Args *a) {
  a->str = a->device_description->debug;
  a->str_size = strlen(a->str);
  return NULL;
}

static PJRT_Error *desc_tostring(PJRT_DeviceDescription_String_Args *a) {
  a->str = a->device_description->str;
  a->str_size = strlen(a->str);
  return NULL;
}

static PJRT_Error *device_description(PJRT_Device_GetDescription_Args *a) {
  a->device_description = &a->device->desc;
  return NULL;
}

static PJRT_Error *device_addressable(PJRT_Device_IsAddressable_Args *a) {
  a->is_addressable = true;
  return NULL;
}

static PJRT_Error *device_hardware_id(PJRT_Device_LocalHardwareId_Args *a) {
  a->local_hardware_id = a->device->desc.id;
  return NULL;
}

static PJRT_Error *device_memories(PJRT_Device_AddressableMemories_Args *a) {
  a->memories = &a->device->memory_ptr;
  a->num_memories = 1;
  return NULL;
}

static PJRT_Error *device_default_memory(PJRT_Device_DefaultMemory_Args *a) {
  a->memory = &a->device->memory;
  return NULL;
}

static void no_attributes(void *device_attributes) {}

static PJRT_Error *device_attributes(PJRT_Device_GetAttributes_Args *a) {
  a->attributes = NULL;
  a->num_attributes = 0;
  a->device_attributes = NULL;
  a->attributes_deleter = no_attributes;
  return NULL;
}

/* ---- memories: one "device" memory per device ---- */

static PJRT_Error *memory_id(PJRT_Memory_Int_Args *a) {
  a->value = a->memory->id;
  return NULL;
}

static PJRT_Error *memory_kind_id(PJRT_Memory_Int_Args *a) {
  a->value = 0;
  return NULL;
}

static PJRT_Error *memory_kind(PJRT_Memory_String_Args *a) {
  a->str = "device";
  a->str_size = 6;
  return NULL;
}

static PJRT_Error *memory_string(PJRT_Memory_String_Args *a) {
  a->str = a->memory->str;
  a->str_size = strlen(a->str);
  return NULL;
}

static PJRT_Error *memory_devices(PJRT_Memory_AddressableByDevices_Args *a) {
  a->devices = &a->memory->device->client->device_ptrs[a->memory->device->desc.id];
  a->num_devices = 1;
  return NULL;
}

/* ---- the table ---- */

#define X(name)                                                                               \
  static PJRT_Error *stub_##name(void *args) {                                                \
    return tpu__pjrt_error(PJRT_Error_Code_UNIMPLEMENTED, "%s not implemented", #name);        \
  }
PJRT_API_SLOTS(X)
#undef X

/* Version 0.94 has 129 slots after the 40-byte head: a slot lost or added in the list
 * would shift every later one. */
_Static_assert(sizeof(PJRT_Api) == 40 + 129 * sizeof(pjrt_fn), "PJRT_API_SLOTS is not the 0.94 list");

static PJRT_Api api;

TPU_PJRT_EXPORT const PJRT_Api *GetPjrtApi(void) {
  pthread_mutex_lock(&tpu__pjrt_lock);
  if (!api.struct_size) {
#define X(name) api.name = stub_##name;
    PJRT_API_SLOTS(X)
#undef X
#define SET(slot, fn) api.slot = (pjrt_fn)(void (*)(void))(fn)
    SET(PJRT_Error_Destroy, error_destroy);
    SET(PJRT_Error_Message, error_message);
    SET(PJRT_Error_GetCode, error_getcode);
    SET(PJRT_Plugin_Initialize, plugin_initialize);
    SET(PJRT_Plugin_Attributes, plugin_attributes);
    SET(PJRT_Event_Destroy, event_destroy);
    SET(PJRT_Event_IsReady, event_isready);
    SET(PJRT_Event_Error, event_error);
    SET(PJRT_Event_Await, event_error);
    SET(PJRT_Event_OnReady, event_onready);
    SET(PJRT_Client_Create, client_create);
    SET(PJRT_Client_Destroy, client_destroy);
    SET(PJRT_Client_PlatformName, client_platform_name);
    SET(PJRT_Client_ProcessIndex, client_process_index);
    SET(PJRT_Client_PlatformVersion, client_platform_version);
    SET(PJRT_Client_Devices, client_devices);
    SET(PJRT_Client_AddressableDevices, client_devices);
    SET(PJRT_Client_LookupDevice, client_lookup_device);
    SET(PJRT_Client_LookupAddressableDevice, client_lookup_device);
    SET(PJRT_Client_AddressableMemories, client_memories);
    SET(PJRT_Client_DefaultDeviceAssignment, client_default_assignment);
    SET(PJRT_DeviceDescription_Id, desc_id);
    SET(PJRT_DeviceDescription_ProcessIndex, desc_process_index);
    SET(PJRT_DeviceDescription_Attributes, desc_attributes);
    SET(PJRT_DeviceDescription_Kind, desc_kind);
    SET(PJRT_DeviceDescription_DebugString, desc_debug);
    SET(PJRT_DeviceDescription_ToString, desc_tostring);
    SET(PJRT_Device_GetDescription, device_description);
    SET(PJRT_Device_IsAddressable, device_addressable);
    SET(PJRT_Device_LocalHardwareId, device_hardware_id);
    SET(PJRT_Device_AddressableMemories, device_memories);
    SET(PJRT_Device_DefaultMemory, device_default_memory);
    SET(PJRT_Device_GetAttributes, device_attributes);
    SET(PJRT_Memory_Id, memory_id);
    SET(PJRT_Memory_Kind, memory_kind);
    SET(PJRT_Memory_Kind_Id, memory_kind_id);
    SET(PJRT_Memory_DebugString, memory_string);
    SET(PJRT_Memory_ToString, memory_string);
    SET(PJRT_Memory_AddressableByDevices, memory_devices);
#undef SET
    tpu__pjrt_install_buffer(&api);
    tpu__pjrt_install_exec(&api);
    api.pjrt_api_version.struct_size = sizeof api.pjrt_api_version;
    api.pjrt_api_version.major_version = TPU_PJRT_API_MAJOR;
    api.pjrt_api_version.minor_version = TPU_PJRT_API_MINOR;
    api.struct_size = sizeof api;
  }
  pthread_mutex_unlock(&tpu__pjrt_lock);
  return &api;
}
