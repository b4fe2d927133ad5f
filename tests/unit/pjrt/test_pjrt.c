/* The PJRT plugin through its C API table, without JAX: the version and table, the client
 * and its devices, buffers in and out (dense and strided), events, compile through a
 * converter that answers with HLO text, execute on one chip and on a 4-chip pod (blocks
 * assembled and cut back: a replicated result, and a sharded one whose every device gets
 * its own block, cut from the global result or from the rows of a stacked one), the report of the last run, and the errors of stubs, a failed
 * compile and a bad execute. */
#include <stdio.h>
#include <string.h>
#include <unistd.h>

#include "check.h"
#include "pjrt/pjrt_abi.h"
#include "pjrt/pjrt_hooks.h"

const PJRT_Api *GetPjrtApi(void);

static const PJRT_Api *api;

#define CALL(slot, args) api->slot((void *)(args))
#define ARGS(type, name) \
  type name;             \
  memset(&name, 0, sizeof name); \
  name.struct_size = sizeof name

static const char *error_text(PJRT_Error *e, char *buf, size_t n) {
  ARGS(PJRT_Error_Message_Args, m);
  m.error = e;
  ((void (*)(PJRT_Error_Message_Args *))(void (*)(void))api->PJRT_Error_Message)(&m);
  snprintf(buf, n, "%.*s", (int)m.message_size, m.message);
  return buf;
}

static void error_free(PJRT_Error *e) {
  ARGS(PJRT_Error_Destroy_Args, d);
  d.error = e;
  ((void (*)(PJRT_Error_Destroy_Args *))(void (*)(void))api->PJRT_Error_Destroy)(&d);
}

/* Fails the test with the error's message when e is set. */
static int ok(PJRT_Error *e, int line) {
  if (!e) return 1;
  char buf[1024];
  fprintf(stderr, "%s:%d: unexpected error: %s\n", __FILE__, line, error_text(e, buf, sizeof buf));
  error_free(e);
  check_failures_++;
  return 0;
}
#define OK(e) ok((e), __LINE__)

static void event_free(PJRT_Event *ev) {
  ARGS(PJRT_Event_Args, a);
  a.event = ev;
  OK(CALL(PJRT_Event_Destroy, &a));
}

/* ---- the converter: the "code" names a program of this table ---- */

static const char *ADD_HLO =
    "HloModule add\n\n"
    "region {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n\n"
    "ENTRY main {\n  a = f32[2,3]{1,0} parameter(0)\n  b = f32[2,3]{1,0} parameter(1)\n"
    "  c = f32[2,3]{1,0} add(a, b)\n  z = f32[] constant(0)\n"
    "  s = f32[] reduce(c, z), dimensions={0,1}, to_apply=region\n"
    "  ROOT t = (f32[2,3]{1,0}, f32[]) tuple(c, s)\n}\n";
static const char *ADD_INFO =
    "name add replicas 1 partitions 1 assign 0\n"
    "params 2\n11 2 2 3 2 3 0 0\n11 2 2 3 2 3 0 0\n"
    "outputs 2\n11 2 2 3 2 3 0 0\n11 0\n";

/* XLA's SPMD form over 4 chips: each holds 2 of 8 values; the all-reduce sums them. */
static const char *POD_HLO =
    "HloModule pod, num_partitions=4\n\n"
    "region {\n  x = f32[] parameter(0)\n  y = f32[] parameter(1)\n  ROOT s = f32[] add(x, y)\n}\n\n"
    "ENTRY main {\n  p = f32[2]{0} parameter(0), sharding={devices=[4]<=[4]}\n"
    "  ROOT r = f32[2]{0} all-reduce(p), channel_id=1, replica_groups={{0,1,2,3}}, "
    "use_global_device_ids=true, to_apply=region\n}\n";
static const char *POD_INFO =
    "name pod replicas 1 partitions 4 assign 0 1 2 3\n"
    "params 1\n11 1 8 2 0 2 4 6\n"
    "outputs 1\n11 1 2 2 0 0 0 0\n";

/* The same shards squared, the result sharded as the operand: device d gets its own block
 * (2d)^2, (2d+1)^2 of the global f32[8] the run assembles. */
static const char *PODS_HLO =
    "HloModule pods, num_partitions=4\n\n"
    "ENTRY main {\n  p = f32[2]{0} parameter(0), sharding={devices=[4]<=[4]}\n"
    "  ROOT m = f32[2]{0} multiply(p, p), sharding={devices=[4]<=[4]}\n}\n";
static const char *PODS_INFO =
    "name pods replicas 1 partitions 4 assign 0 1 2 3\n"
    "params 1\n11 1 8 2 0 2 4 6\n"
    "outputs 1\n11 1 8 2 0 2 4 6\n";

/* The same without the result's sharding: the run stacks the devices' results one row per
 * device, and device d's buffer gets row d. */
static const char *PODR_HLO =
    "HloModule podr, num_partitions=4\n\n"
    "ENTRY main {\n  p = f32[2]{0} parameter(0), sharding={devices=[4]<=[4]}\n"
    "  ROOT m = f32[2]{0} multiply(p, p)\n}\n";
static const char *PODR_INFO =
    "name podr replicas 1 partitions 4 assign 0 1 2 3\n"
    "params 1\n11 1 8 2 0 2 4 6\n"
    "outputs 1\n11 1 8 2 0 2 4 6\n";

static int compiles;

static void converter(void *job, const void *code, size_t n, const char *format, const void *options,
                      size_t options_size) {
  compiles++;
  if (strcmp(format, "test")) {
    tpusim_pjrt_compile_error(job, "format is not 'test'");
  } else if (n == 3 && !memcmp(code, "add", 3)) {
    tpusim_pjrt_compile_result(job, ADD_HLO, ADD_INFO, "prog", 4);
  } else if (n == 3 && !memcmp(code, "pod", 3)) {
    tpusim_pjrt_compile_result(job, POD_HLO, POD_INFO, "", 0);
  } else if (n == 4 && !memcmp(code, "pods", 4)) {
    tpusim_pjrt_compile_result(job, PODS_HLO, PODS_INFO, "", 0);
  } else if (n == 4 && !memcmp(code, "podr", 4)) {
    tpusim_pjrt_compile_result(job, PODR_HLO, PODR_INFO, "", 0);
  } else if (n == 3 && !memcmp(code, "bad", 3)) {
    tpusim_pjrt_compile_result(job, "HloModule bad\n\nENTRY main {\n  ROOT x = f32[] nonsense()\n}\n",
                               "name bad replicas 1 partitions 1 assign 0 params 0 outputs 1 11 0\n", "", 0);
  } else {
    tpusim_pjrt_compile_error(job, "unknown test program");
  }
}

static PJRT_LoadedExecutable *compile(PJRT_Client *c, const char *name, PJRT_Error **err) {
  PJRT_Program prog;
  memset(&prog, 0, sizeof prog);
  prog.struct_size = sizeof prog;
  prog.code = (char *)name;
  prog.code_size = strlen(name);
  prog.format = "test";
  prog.format_size = 4;
  ARGS(PJRT_Client_Compile_Args, a);
  a.client = c;
  a.program = &prog;
  a.compile_options = "";
  *err = CALL(PJRT_Client_Compile, &a);
  return a.executable;
}

static PJRT_Buffer *from_host(PJRT_Client *c, PJRT_Device *dev, const float *data, int rank, const int64_t *dims,
                              const int64_t *strides) {
  ARGS(PJRT_Client_BufferFromHostBuffer_Args, a);
  a.client = c;
  a.data = data;
  a.type = PJRT_T_F32;
  a.dims = dims;
  a.num_dims = (size_t)rank;
  a.byte_strides = strides;
  a.num_byte_strides = strides ? (size_t)rank : 0;
  a.device = dev;
  if (!OK(CALL(PJRT_Client_BufferFromHostBuffer, &a))) return NULL;
  CHECK(a.done_with_host_buffer != NULL);
  event_free(a.done_with_host_buffer);
  return a.buffer;
}

static void to_host(PJRT_Buffer *b, float *out, size_t nbytes) {
  ARGS(PJRT_Buffer_ToHostBuffer_Args, q);
  q.src = b;
  OK(CALL(PJRT_Buffer_ToHostBuffer, &q)); /* size query */
  CHECK_EQ_INT(q.dst_size, nbytes);
  q.dst = out;
  OK(CALL(PJRT_Buffer_ToHostBuffer, &q));
  event_free(q.event);
}

static void buffer_free(PJRT_Buffer *b) {
  ARGS(PJRT_Buffer_Args, a);
  a.buffer = b;
  OK(CALL(PJRT_Buffer_Destroy, &a));
}

static int ready_calls;
static void on_ready(PJRT_Error *e, void *user) {
  CHECK(e == NULL);
  CHECK(user == &ready_calls);
  ready_calls++;
}

static void test_table(void) {
  CHECK_EQ_INT(api->pjrt_api_version.major_version, 0);
  CHECK_EQ_INT(api->pjrt_api_version.minor_version, 94);
  CHECK_EQ_INT(api->struct_size, sizeof *api);
  /* every slot is filled; a stub says what is missing */
  char buf[256];
  PJRT_Error *e = api->PJRT_Buffer_CopyRawToHostFuture(NULL);
  CHECK_EQ_STR(error_text(e, buf, sizeof buf), "tpusim PJRT: PJRT_Buffer_CopyRawToHostFuture not implemented");
  ARGS(PJRT_Error_GetCode_Args, g);
  g.error = e;
  OK(CALL(PJRT_Error_GetCode, &g));
  CHECK_EQ_INT(g.code, PJRT_Error_Code_UNIMPLEMENTED);
  error_free(e);
}

static PJRT_Client *client_new(int ndev) {
  PJRT_NamedValue opts[2];
  memset(opts, 0, sizeof opts);
  opts[0].struct_size = opts[1].struct_size = sizeof opts[0];
  opts[0].name = "num_devices";
  opts[0].name_size = strlen(opts[0].name);
  opts[0].type = PJRT_NamedValue_kInt64;
  opts[0].int64_value = ndev;
  opts[0].value_size = 1;
  opts[1].name = "chip";
  opts[1].name_size = 4;
  opts[1].type = PJRT_NamedValue_kString;
  opts[1].string_value = "v5p";
  opts[1].value_size = 3;
  ARGS(PJRT_Client_Create_Args, a);
  a.create_options = opts;
  a.num_options = 2;
  OK(CALL(PJRT_Client_Create, &a));
  return a.client;
}

static void test_client(PJRT_Client *c) {
  ARGS(PJRT_Client_String_Args, pn);
  pn.client = c;
  OK(CALL(PJRT_Client_PlatformName, &pn));
  CHECK(pn.str_size == 6 && !memcmp(pn.str, "tpusim", 6));
  ARGS(PJRT_Client_Devices_Args, dv);
  dv.client = c;
  OK(CALL(PJRT_Client_Devices, &dv));
  CHECK_EQ_INT(dv.num_devices, 4);
  ARGS(PJRT_Device_GetDescription_Args, gd);
  gd.device = dv.devices[3];
  OK(CALL(PJRT_Device_GetDescription, &gd));
  ARGS(PJRT_DeviceDescription_Int_Args, id);
  id.device_description = gd.device_description;
  OK(CALL(PJRT_DeviceDescription_Id, &id));
  CHECK_EQ_INT(id.value, 3);
  ARGS(PJRT_DeviceDescription_String_Args, kind);
  kind.device_description = gd.device_description;
  OK(CALL(PJRT_DeviceDescription_Kind, &kind));
  CHECK_EQ_STR(kind.str, "tpusim v5p");
  ARGS(PJRT_Device_DefaultMemory_Args, dm);
  dm.device = dv.devices[3];
  OK(CALL(PJRT_Device_DefaultMemory, &dm));
  ARGS(PJRT_Memory_AddressableByDevices_Args, md);
  md.memory = dm.memory;
  OK(CALL(PJRT_Memory_AddressableByDevices, &md));
  CHECK(md.num_devices == 1 && md.devices[0] == dv.devices[3]);
  ARGS(PJRT_Client_LookupDevice_Args, lk);
  lk.client = c;
  lk.id = 9;
  PJRT_Error *e = CALL(PJRT_Client_LookupDevice, &lk);
  CHECK(e != NULL);
  error_free(e);
}

static void test_buffers(PJRT_Client *c, PJRT_Device *const *devs) {
  /* a strided source: every other column of a 2 x 6 array */
  float src[12] = {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11}, out[6] = {0};
  int64_t dims[2] = {2, 3}, strides[2] = {24, 8};
  PJRT_Buffer *b = from_host(c, devs[1], src, 2, dims, strides);
  if (!b) return;
  to_host(b, out, sizeof out);
  const float want[6] = {0, 2, 4, 6, 8, 10};
  CHECK(!memcmp(out, want, sizeof want));
  ARGS(PJRT_Buffer_Dimensions_Args, d);
  d.buffer = b;
  OK(CALL(PJRT_Buffer_Dimensions, &d));
  CHECK(d.num_dims == 2 && d.dims[0] == 2 && d.dims[1] == 3);
  ARGS(PJRT_Buffer_Device_Args, bd);
  bd.buffer = b;
  OK(CALL(PJRT_Buffer_Device, &bd));
  CHECK(bd.device == devs[1]);
  ARGS(PJRT_Buffer_GetMemoryLayout_Args, ml);
  ml.buffer = b;
  OK(CALL(PJRT_Buffer_GetMemoryLayout, &ml));
  CHECK(ml.layout.type == 0 && ml.layout.tiled.num_tiles == 0 && ml.layout.tiled.minor_to_major_size == 2);
  CHECK(ml.layout.tiled.minor_to_major[0] == 1 && ml.layout.tiled.minor_to_major[1] == 0);
  ARGS(PJRT_Buffer_CopyToDevice_Args, cp);
  cp.buffer = b;
  cp.dst_device = devs[2];
  OK(CALL(PJRT_Buffer_CopyToDevice, &cp));
  float out2[6] = {0};
  to_host(cp.dst_buffer, out2, sizeof out2);
  CHECK(!memcmp(out2, want, sizeof want));
  ARGS(PJRT_Buffer_ReadyEvent_Args, re);
  re.buffer = cp.dst_buffer;
  OK(CALL(PJRT_Buffer_ReadyEvent, &re));
  ARGS(PJRT_Event_OnReady_Args, on);
  on.event = re.event;
  on.callback = on_ready;
  on.user_arg = &ready_calls;
  OK(CALL(PJRT_Event_OnReady, &on));
  CHECK_EQ_INT(ready_calls, 1);
  event_free(re.event);
  ARGS(PJRT_Buffer_Args, del);
  del.buffer = b;
  OK(CALL(PJRT_Buffer_Delete, &del));
  ARGS(PJRT_Buffer_Bool_Args, isdel);
  isdel.buffer = b;
  OK(CALL(PJRT_Buffer_IsDeleted, &isdel));
  CHECK(isdel.value);
  ARGS(PJRT_Buffer_ToHostBuffer_Args, q);
  q.src = b;
  q.dst = out;
  q.dst_size = sizeof out;
  PJRT_Error *e = CALL(PJRT_Buffer_ToHostBuffer, &q);
  CHECK(e != NULL);
  error_free(e);
  buffer_free(b);
  buffer_free(cp.dst_buffer);
}

static void execute_free(PJRT_LoadedExecutable *le) {
  ARGS(PJRT_LoadedExecutable_Args, a);
  a.executable = le;
  OK(CALL(PJRT_LoadedExecutable_Destroy, &a));
}

static void test_one_chip(PJRT_Client *c, PJRT_Device *const *devs) {
  PJRT_Error *e;
  PJRT_LoadedExecutable *le = compile(c, "add", &e);
  if (!OK(e)) return;
  ARGS(PJRT_LoadedExecutable_GetExecutable_Args, ge);
  ge.loaded_executable = le;
  OK(CALL(PJRT_LoadedExecutable_GetExecutable, &ge));
  ARGS(PJRT_Executable_Size_Args, no);
  no.executable = ge.executable;
  OK(CALL(PJRT_Executable_NumOutputs, &no));
  CHECK_EQ_INT(no.value, 2);
  ARGS(PJRT_Executable_OutputDimensions_Args, od);
  od.executable = ge.executable;
  OK(CALL(PJRT_Executable_OutputDimensions, &od));
  CHECK(od.num_outputs == 2 && od.dim_sizes[0] == 2 && od.dim_sizes[1] == 0 && od.dims[1] == 3);
  ARGS(PJRT_Executable_OptimizedProgram_Args, op);
  PJRT_Program prog;
  memset(&prog, 0, sizeof prog);
  op.executable = ge.executable;
  op.program = &prog;
  OK(CALL(PJRT_Executable_OptimizedProgram, &op));
  CHECK_EQ_INT(prog.code_size, 4);
  ARGS(PJRT_Executable_Destroy_Args, ed);
  ed.executable = ge.executable;
  OK(CALL(PJRT_Executable_Destroy, &ed));

  float x[6] = {1, 2, 3, 4, 5, 6}, y[6] = {10, 20, 30, 40, 50, 60}, sum[6], total = 0;
  int64_t dims[2] = {2, 3};
  PJRT_Buffer *in[2] = {from_host(c, devs[0], x, 2, dims, NULL), from_host(c, devs[0], y, 2, dims, NULL)};
  PJRT_Buffer *const *args[1] = {in};
  PJRT_Buffer *outs[2] = {NULL, NULL};
  PJRT_Buffer **outlists[1] = {outs};
  PJRT_Event *done[1] = {NULL};
  ARGS(PJRT_LoadedExecutable_Execute_Args, ex);
  ex.executable = le;
  ex.argument_lists = args;
  ex.num_devices = 1;
  ex.num_args = 2;
  ex.output_lists = outlists;
  ex.device_complete_events = done;
  if (OK(CALL(PJRT_LoadedExecutable_Execute, &ex))) {
    to_host(outs[0], sum, sizeof sum);
    to_host(outs[1], &total, sizeof total);
    for (int i = 0; i < 6; i++) CHECK_NEAR(sum[i], x[i] + y[i], 0);
    CHECK_NEAR(total, 231, 0);
    event_free(done[0]);
    buffer_free(outs[0]);
    buffer_free(outs[1]);
    char name[64];
    CHECK_EQ_INT(tpusim_pjrt_last_run(name, sizeof name), 1);
    CHECK_EQ_STR(name, "add");
    char path[64], err[256];
    snprintf(path, sizeof path, "/tmp/tpusim_pjrt_%d.json", (int)getpid());
    CHECK_EQ_INT(tpusim_pjrt_last_write(0, path, err, sizeof err), 0);
    FILE *f = fopen(path, "r");
    char head[4096] = {0};
    if (f) {
      CHECK(fread(head, 1, sizeof head - 1, f) > 0);
      fclose(f);
    }
    CHECK(strstr(head, "\"v5p\"") != NULL);
    unlink(path);
  }
  /* a wrong shape is refused */
  int64_t bad_dims[2] = {3, 2};
  PJRT_Buffer *bad = from_host(c, devs[0], x, 2, bad_dims, NULL);
  PJRT_Buffer *in2[2] = {in[0], bad};
  PJRT_Buffer *const *args2[1] = {in2};
  ex.argument_lists = args2;
  ex.device_complete_events = NULL;
  e = CALL(PJRT_LoadedExecutable_Execute, &ex);
  char buf[512];
  CHECK(e && strstr(error_text(e, buf, sizeof buf), "argument 1 on device 0 has the wrong type or shape"));
  error_free(e);
  CHECK(outs[0] == NULL && outs[1] == NULL);
  buffer_free(bad);
  buffer_free(in[0]);
  buffer_free(in[1]);
  execute_free(le);
}

static void test_pod(PJRT_Client *c, PJRT_Device *const *devs) {
  PJRT_Error *e;
  PJRT_LoadedExecutable *le = compile(c, "pod", &e);
  if (!OK(e)) return;
  ARGS(PJRT_LoadedExecutable_AddressableDevices_Args, ad);
  ad.executable = le;
  OK(CALL(PJRT_LoadedExecutable_AddressableDevices, &ad));
  CHECK_EQ_INT(ad.num_devices, 4);
  float shard[4][2];
  PJRT_Buffer *in[4][1];
  PJRT_Buffer *const *args[4];
  PJRT_Buffer *outs[4][1];
  PJRT_Buffer **outlists[4];
  int64_t dims[1] = {2};
  for (int d = 0; d < 4; d++) {
    shard[d][0] = (float)(2 * d);
    shard[d][1] = (float)(2 * d + 1);
    in[d][0] = from_host(c, devs[d], shard[d], 1, dims, NULL);
    args[d] = in[d];
    outlists[d] = outs[d];
  }
  ARGS(PJRT_LoadedExecutable_Execute_Args, ex);
  ex.executable = le;
  ex.argument_lists = args;
  ex.num_devices = 4;
  ex.num_args = 1;
  ex.output_lists = outlists;
  if (OK(CALL(PJRT_LoadedExecutable_Execute, &ex))) {
    for (int d = 0; d < 4; d++) {
      float r[2];
      to_host(outs[d][0], r, sizeof r);
      CHECK_NEAR(r[0], 12, 0);
      CHECK_NEAR(r[1], 16, 0);
      ARGS(PJRT_Buffer_Device_Args, bd);
      bd.buffer = outs[d][0];
      OK(CALL(PJRT_Buffer_Device, &bd));
      CHECK(bd.device == devs[d]);
      buffer_free(outs[d][0]);
    }
  }
  for (int d = 0; d < 4; d++) buffer_free(in[d][0]);
  execute_free(le);
}

/* A sharded result ("pods") and one stacked per device ("podr"): each device's buffer holds
 * its own block. */
static void test_pod_sharded(PJRT_Client *c, PJRT_Device *const *devs, const char *prog) {
  PJRT_Error *e;
  PJRT_LoadedExecutable *le = compile(c, prog, &e);
  if (!OK(e)) return;
  float shard[4][2];
  PJRT_Buffer *in[4][1];
  PJRT_Buffer *const *args[4];
  PJRT_Buffer *outs[4][1];
  PJRT_Buffer **outlists[4];
  int64_t dims[1] = {2};
  for (int d = 0; d < 4; d++) {
    shard[d][0] = (float)(2 * d);
    shard[d][1] = (float)(2 * d + 1);
    in[d][0] = from_host(c, devs[d], shard[d], 1, dims, NULL);
    args[d] = in[d];
    outlists[d] = outs[d];
  }
  ARGS(PJRT_LoadedExecutable_Execute_Args, ex);
  ex.executable = le;
  ex.argument_lists = args;
  ex.num_devices = 4;
  ex.num_args = 1;
  ex.output_lists = outlists;
  if (OK(CALL(PJRT_LoadedExecutable_Execute, &ex))) {
    for (int d = 0; d < 4; d++) {
      float r[2] = {-1, -1};
      ARGS(PJRT_Buffer_Dimensions_Args, bdims);
      bdims.buffer = outs[d][0];
      OK(CALL(PJRT_Buffer_Dimensions, &bdims));
      CHECK(bdims.num_dims == 1 && bdims.dims[0] == 2);
      to_host(outs[d][0], r, sizeof r);
      CHECK_NEAR(r[0], (2.0 * d) * (2.0 * d), 0);
      CHECK_NEAR(r[1], (2.0 * d + 1) * (2.0 * d + 1), 0);
      buffer_free(outs[d][0]);
    }
  }
  for (int d = 0; d < 4; d++) buffer_free(in[d][0]);
  execute_free(le);
}

static void test_compile_errors(PJRT_Client *c) {
  char buf[1024];
  PJRT_Error *e;
  compile(c, "nope", &e);
  CHECK(e && strstr(error_text(e, buf, sizeof buf), "tpusim PJRT: compile: unknown test program"));
  error_free(e);
  compile(c, "bad", &e);
  CHECK(e && strstr(error_text(e, buf, sizeof buf), "bad.hlo:4:"));
  error_free(e);
}

int main(void) {
  api = GetPjrtApi();
  test_table();
  tpusim_pjrt_set_compiler(converter);
  PJRT_Client *c = client_new(4);
  if (!c) CHECK_DONE();
  ARGS(PJRT_Client_Devices_Args, dv);
  dv.client = c;
  OK(CALL(PJRT_Client_Devices, &dv));
  test_client(c);
  test_buffers(c, dv.devices);
  test_one_chip(c, dv.devices);
  test_pod(c, dv.devices);
  test_pod_sharded(c, dv.devices, "pods");
  test_pod_sharded(c, dv.devices, "podr");
  test_compile_errors(c);
  CHECK_EQ_INT(compiles, 6);
  ARGS(PJRT_Client_Destroy_Args, cd);
  cd.client = c;
  OK(CALL(PJRT_Client_Destroy, &cd));
  CHECK_DONE();
}
