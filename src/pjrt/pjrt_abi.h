/* The subset of the PJRT C API ABI the tpusim plugin implements, declared here by hand.
 *
 * Layouts follow XLA's xla/pjrt/c/pjrt_c_api.h at API version 0.94 (openxla/xla commit
 * 0882740a): every argument struct starts with `struct_size` and `extension_start`, fields
 * are only ever appended, and PJRT_Api is a version header followed by function pointers in
 * a fixed order (PJRT_API_SLOTS below, ORDER: that header's PJRT_Api). Only the argument
 * structs of the functions tpusim implements are declared; every other slot is filled with
 * a stub that returns "tpusim PJRT: NAME not implemented". Names keep XLA's spelling so
 * they can be checked against the header side by side. */
#ifndef TPUSIM_PJRT_ABI_H
#define TPUSIM_PJRT_ABI_H
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define TPU_PJRT_API_MAJOR 0
#define TPU_PJRT_API_MINOR 94

typedef struct PJRT_Error PJRT_Error;
typedef struct PJRT_Event PJRT_Event;
typedef struct PJRT_Client PJRT_Client;
typedef struct PJRT_Device PJRT_Device;
typedef struct PJRT_Memory PJRT_Memory;
typedef struct PJRT_DeviceDescription PJRT_DeviceDescription;
typedef struct PJRT_Executable PJRT_Executable;
typedef struct PJRT_LoadedExecutable PJRT_LoadedExecutable;
typedef struct PJRT_Buffer PJRT_Buffer;
typedef struct PJRT_TopologyDescription PJRT_TopologyDescription;

typedef enum {
  PJRT_Error_Code_OK = 0,
  PJRT_Error_Code_UNKNOWN = 2,
  PJRT_Error_Code_INVALID_ARGUMENT = 3,
  PJRT_Error_Code_NOT_FOUND = 5,
  PJRT_Error_Code_RESOURCE_EXHAUSTED = 8,
  PJRT_Error_Code_FAILED_PRECONDITION = 9,
  PJRT_Error_Code_UNIMPLEMENTED = 12,
  PJRT_Error_Code_INTERNAL = 13
} PJRT_Error_Code;

/* PJRT_Buffer_Type: ORDER as in the header (INVALID = 0, PRED, S8 ... ). */
enum {
  PJRT_T_INVALID = 0, PJRT_T_PRED, PJRT_T_S8, PJRT_T_S16, PJRT_T_S32, PJRT_T_S64,
  PJRT_T_U8, PJRT_T_U16, PJRT_T_U32, PJRT_T_U64, PJRT_T_F16, PJRT_T_F32, PJRT_T_F64,
  PJRT_T_BF16, PJRT_T_C64, PJRT_T_C128, PJRT_T_F8E5M2, PJRT_T_F8E4M3FN
};

enum { PJRT_NamedValue_kString = 0, PJRT_NamedValue_kInt64, PJRT_NamedValue_kInt64List,
       PJRT_NamedValue_kFloat, PJRT_NamedValue_kBool };

/* The common head of every argument struct. */
#define PJRT_HEAD size_t struct_size; void *extension_start

/* PJRT_Buffer_MemoryLayout: a tiled layout (minor_to_major, tiles) or byte strides. */
typedef struct {
  PJRT_HEAD;
  union {
    struct { PJRT_HEAD; const int64_t *minor_to_major; size_t minor_to_major_size;
             const int64_t *tile_dims; const size_t *tile_dim_sizes; size_t num_tiles; } tiled;
    struct { PJRT_HEAD; const int64_t *byte_strides; size_t num_byte_strides; } strides;
  };
  int type; /* 0: tiled, 1: strides */
} PJRT_Buffer_MemoryLayout;

typedef struct PJRT_NamedValue {
  PJRT_HEAD;
  const char *name;
  size_t name_size;
  int type; /* PJRT_NamedValue_k* */
  union {
    const char *string_value;
    int64_t int64_value;
    const int64_t *int64_array_value;
    float float_value;
    bool bool_value;
  };
  size_t value_size;
} PJRT_NamedValue;

typedef struct { PJRT_HEAD; PJRT_Error *error; } PJRT_Error_Destroy_Args;
typedef struct { PJRT_HEAD; const PJRT_Error *error; const char *message; size_t message_size; } PJRT_Error_Message_Args;
typedef struct { PJRT_HEAD; const PJRT_Error *error; PJRT_Error_Code code; } PJRT_Error_GetCode_Args;
typedef struct { PJRT_HEAD; } PJRT_Plugin_Initialize_Args;
typedef struct { PJRT_HEAD; const PJRT_NamedValue *attributes; size_t num_attributes; } PJRT_Plugin_Attributes_Args;

typedef struct { PJRT_HEAD; PJRT_Event *event; } PJRT_Event_Args; /* Destroy, Error, Await */
typedef struct { PJRT_HEAD; PJRT_Event *event; bool is_ready; } PJRT_Event_IsReady_Args;
typedef void (*PJRT_Event_OnReadyCallback)(PJRT_Error *error, void *user_arg);
typedef struct { PJRT_HEAD; PJRT_Event *event; PJRT_Event_OnReadyCallback callback; void *user_arg; } PJRT_Event_OnReady_Args;

typedef struct {
  PJRT_HEAD;
  const PJRT_NamedValue *create_options;
  size_t num_options;
  void *kv_get_callback, *kv_get_user_arg, *kv_put_callback, *kv_put_user_arg;
  PJRT_Client *client; /* out */
} PJRT_Client_Create_Args;
typedef struct { PJRT_HEAD; PJRT_Client *client; } PJRT_Client_Destroy_Args;
/* PlatformName, PlatformVersion: a string out. */
typedef struct { PJRT_HEAD; PJRT_Client *client; const char *str; size_t str_size; } PJRT_Client_String_Args;
typedef struct { PJRT_HEAD; PJRT_Client *client; int process_index; } PJRT_Client_ProcessIndex_Args;
/* Devices, AddressableDevices. */
typedef struct { PJRT_HEAD; PJRT_Client *client; PJRT_Device *const *devices; size_t num_devices; } PJRT_Client_Devices_Args;
typedef struct { PJRT_HEAD; PJRT_Client *client; int id; PJRT_Device *device; } PJRT_Client_LookupDevice_Args;
typedef struct { PJRT_HEAD; PJRT_Client *client; PJRT_Memory *const *memories; size_t num_memories; } PJRT_Client_AddressableMemories_Args;

typedef struct {
  PJRT_HEAD;
  char *code;
  size_t code_size;
  const char *format;
  size_t format_size;
} PJRT_Program;
typedef struct {
  PJRT_HEAD;
  PJRT_Client *client;
  const PJRT_Program *program;
  const char *compile_options;
  size_t compile_options_size;
  PJRT_LoadedExecutable *executable; /* out */
} PJRT_Client_Compile_Args;
typedef struct {
  PJRT_HEAD;
  PJRT_Client *client;
  int num_replicas, num_partitions;
  size_t default_assignment_size;
  int *default_assignment;
} PJRT_Client_DefaultDeviceAssignment_Args;
typedef struct {
  PJRT_HEAD;
  PJRT_Client *client;
  const void *data;
  int type; /* PJRT_Buffer_Type */
  const int64_t *dims;
  size_t num_dims;
  const int64_t *byte_strides;
  size_t num_byte_strides;
  int host_buffer_semantics;
  PJRT_Device *device;
  PJRT_Memory *memory;
  PJRT_Buffer_MemoryLayout *device_layout;
  PJRT_Event *done_with_host_buffer; /* out */
  PJRT_Buffer *buffer;               /* out */
} PJRT_Client_BufferFromHostBuffer_Args;
typedef struct { PJRT_HEAD; PJRT_Client *client; PJRT_TopologyDescription *topology; } PJRT_Client_TopologyDescription_Args;

/* Device descriptions. */
typedef struct { PJRT_HEAD; PJRT_DeviceDescription *device_description; int value; } PJRT_DeviceDescription_Int_Args; /* Id, ProcessIndex */
typedef struct { PJRT_HEAD; PJRT_DeviceDescription *device_description; size_t num_attributes; const PJRT_NamedValue *attributes; } PJRT_DeviceDescription_Attributes_Args;
typedef struct { PJRT_HEAD; PJRT_DeviceDescription *device_description; const char *str; size_t str_size; } PJRT_DeviceDescription_String_Args; /* Kind, DebugString, ToString */

/* Devices. */
typedef struct { PJRT_HEAD; PJRT_Device *device; PJRT_DeviceDescription *device_description; } PJRT_Device_GetDescription_Args;
typedef struct { PJRT_HEAD; PJRT_Device *device; bool is_addressable; } PJRT_Device_IsAddressable_Args;
typedef struct { PJRT_HEAD; PJRT_Device *device; int local_hardware_id; } PJRT_Device_LocalHardwareId_Args;
typedef struct { PJRT_HEAD; PJRT_Device *device; PJRT_Memory *const *memories; size_t num_memories; } PJRT_Device_AddressableMemories_Args;
typedef struct { PJRT_HEAD; PJRT_Device *device; PJRT_Memory *memory; } PJRT_Device_DefaultMemory_Args;
typedef struct {
  PJRT_HEAD;
  PJRT_Device *device;
  const PJRT_NamedValue *attributes; /* out */
  size_t num_attributes;             /* out */
  void *device_attributes;           /* out: handed to attributes_deleter */
  void (*attributes_deleter)(void *device_attributes);
} PJRT_Device_GetAttributes_Args;

/* Memories. */
typedef struct { PJRT_HEAD; PJRT_Memory *memory; int value; } PJRT_Memory_Int_Args; /* Id, Kind_Id */
typedef struct { PJRT_HEAD; PJRT_Memory *memory; const char *str; size_t str_size; } PJRT_Memory_String_Args; /* Kind, DebugString, ToString */
typedef struct { PJRT_HEAD; PJRT_Memory *memory; PJRT_Device *const *devices; size_t num_devices; } PJRT_Memory_AddressableByDevices_Args;

/* Executables. */
typedef struct { PJRT_HEAD; PJRT_Executable *executable; } PJRT_Executable_Destroy_Args;
typedef struct { PJRT_HEAD; PJRT_LoadedExecutable *executable; } PJRT_LoadedExecutable_Args; /* Destroy, Delete */
typedef struct { PJRT_HEAD; PJRT_LoadedExecutable *executable; bool is_deleted; } PJRT_LoadedExecutable_IsDeleted_Args;
typedef struct { PJRT_HEAD; PJRT_LoadedExecutable *loaded_executable; PJRT_Executable *executable; } PJRT_LoadedExecutable_GetExecutable_Args;
typedef struct { PJRT_HEAD; PJRT_Executable *executable; const char *str; size_t str_size; } PJRT_Executable_String_Args; /* Name, Fingerprint */
typedef struct { PJRT_HEAD; PJRT_LoadedExecutable *executable; const char *str; size_t str_size; } PJRT_LoadedExecutable_Fingerprint_Args;
typedef struct { PJRT_HEAD; PJRT_Executable *executable; size_t value; } PJRT_Executable_Size_Args; /* NumReplicas, NumPartitions, NumOutputs */
typedef struct { PJRT_HEAD; PJRT_Executable *executable; int64_t size_in_bytes; } PJRT_Executable_SizeOfGeneratedCodeInBytes_Args;
typedef struct { PJRT_HEAD; PJRT_Executable *executable; size_t num_properties; const PJRT_NamedValue *properties; } PJRT_Executable_GetCostAnalysis_Args;
typedef struct { PJRT_HEAD; PJRT_Executable *executable; size_t num_outputs; const char *const *memory_kinds; const size_t *memory_kind_sizes; } PJRT_Executable_OutputMemoryKinds_Args;
typedef struct { PJRT_HEAD; PJRT_Executable *executable; PJRT_Program *program; } PJRT_Executable_OptimizedProgram_Args;
typedef struct { PJRT_HEAD; PJRT_Executable *executable; int *output_types; size_t num_output_types; } PJRT_Executable_OutputElementTypes_Args;
typedef struct { PJRT_HEAD; PJRT_Executable *executable; size_t num_outputs; const int64_t *dims; const size_t *dim_sizes; } PJRT_Executable_OutputDimensions_Args;
typedef struct {
  PJRT_HEAD;
  PJRT_Executable *executable;
  int64_t generated_code_size_in_bytes, argument_size_in_bytes, output_size_in_bytes,
      alias_size_in_bytes, temp_size_in_bytes;
  int64_t host_generated_code_size_in_bytes, host_argument_size_in_bytes,
      host_output_size_in_bytes, host_alias_size_in_bytes, host_temp_size_in_bytes;
  int64_t peak_memory_in_bytes, total_size_in_bytes;
} PJRT_Executable_GetCompiledMemoryStats_Args;
typedef struct { PJRT_HEAD; PJRT_LoadedExecutable *executable; PJRT_Device *const *devices; size_t num_devices; } PJRT_LoadedExecutable_AddressableDevices_Args;
typedef struct {
  PJRT_HEAD;
  PJRT_LoadedExecutable *executable;
  const char *serialized_bytes;
  size_t serialized_bytes_size;
  void *serialized_device_assignment;
  void (*serialized_device_assignment_deleter)(void *da);
} PJRT_LoadedExecutable_GetDeviceAssignment_Args;
typedef struct {
  PJRT_HEAD;
  PJRT_Executable *executable;
  const char *serialized_bytes;
  size_t serialized_bytes_size;
  void *serialized_compile_options;
  void (*serialized_compile_options_deleter)(void *options);
} PJRT_Executable_GetCompileOptions_Args;
/* The fields up to the donation list (all versions since 0.40 have them). */
typedef struct {
  PJRT_HEAD;
  void *send_callbacks;
  void *recv_callbacks;
  size_t num_send_ops;
  size_t num_recv_ops;
  int launch_id;
  const int64_t *non_donatable_input_indices;
  size_t num_non_donatable_input_indices;
} PJRT_ExecuteOptions;

typedef struct {
  PJRT_HEAD;
  PJRT_LoadedExecutable *executable;
  PJRT_ExecuteOptions *options; /* only the donation list is used */
  PJRT_Buffer *const *const *argument_lists;
  size_t num_devices;
  size_t num_args;
  PJRT_Buffer **const *output_lists;
  PJRT_Event **device_complete_events;
  PJRT_Device *execute_device;
} PJRT_LoadedExecutable_Execute_Args;

/* Buffers. */
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; } PJRT_Buffer_Args; /* Destroy, Delete, Increase/DecreaseExternalReferenceCount */
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; int type; } PJRT_Buffer_ElementType_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; const int64_t *dims; size_t num_dims; } PJRT_Buffer_Dimensions_Args; /* also Unpadded */
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; const size_t *dynamic_dim_indices; size_t num_dynamic_dims; } PJRT_Buffer_DynamicDimensionIndices_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; size_t on_device_size_in_bytes; } PJRT_Buffer_OnDeviceSizeInBytes_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; PJRT_Device *device; } PJRT_Buffer_Device_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; PJRT_Memory *memory; } PJRT_Buffer_Memory_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; bool value; } PJRT_Buffer_Bool_Args; /* IsDeleted, IsOnCpu */
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; PJRT_Device *dst_device; PJRT_Buffer *dst_buffer; } PJRT_Buffer_CopyToDevice_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; PJRT_Memory *dst_memory; PJRT_Buffer *dst_buffer; } PJRT_Buffer_CopyToMemory_Args;
typedef struct {
  PJRT_HEAD;
  PJRT_Buffer *src;
  PJRT_Buffer_MemoryLayout *host_layout; /* NULL or dense row-major */
  void *dst;
  size_t dst_size;
  PJRT_Event *event; /* out */
} PJRT_Buffer_ToHostBuffer_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; PJRT_Event *event; } PJRT_Buffer_ReadyEvent_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; uintptr_t buffer_pointer; } PJRT_Buffer_UnsafePointer_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; PJRT_Buffer_MemoryLayout layout; } PJRT_Buffer_GetMemoryLayout_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; void *device_memory_ptr; } PJRT_Buffer_OpaqueDeviceMemoryDataPointer_Args;
typedef struct { PJRT_HEAD; PJRT_Buffer *buffer; void *dst; int64_t offset, transfer_size; PJRT_Event *event; } PJRT_Buffer_CopyRawToHost_Args;

/* ORDER: the function pointers of PJRT_Api, version 0.94. */
#define PJRT_API_SLOTS(X)                                                                     \
  X(PJRT_Error_Destroy) X(PJRT_Error_Message) X(PJRT_Error_GetCode)                           \
  X(PJRT_Plugin_Initialize) X(PJRT_Plugin_Attributes)                                        \
  X(PJRT_Event_Destroy) X(PJRT_Event_IsReady) X(PJRT_Event_Error) X(PJRT_Event_Await)          \
  X(PJRT_Event_OnReady)                                                                      \
  X(PJRT_Client_Create) X(PJRT_Client_Destroy) X(PJRT_Client_PlatformName)                    \
  X(PJRT_Client_ProcessIndex) X(PJRT_Client_PlatformVersion) X(PJRT_Client_Devices)           \
  X(PJRT_Client_AddressableDevices) X(PJRT_Client_LookupDevice)                              \
  X(PJRT_Client_LookupAddressableDevice) X(PJRT_Client_AddressableMemories)                  \
  X(PJRT_Client_Compile) X(PJRT_Client_DefaultDeviceAssignment)                              \
  X(PJRT_Client_BufferFromHostBuffer)                                                        \
  X(PJRT_DeviceDescription_Id) X(PJRT_DeviceDescription_ProcessIndex)                         \
  X(PJRT_DeviceDescription_Attributes) X(PJRT_DeviceDescription_Kind)                        \
  X(PJRT_DeviceDescription_DebugString) X(PJRT_DeviceDescription_ToString)                   \
  X(PJRT_Device_GetDescription) X(PJRT_Device_IsAddressable) X(PJRT_Device_LocalHardwareId)   \
  X(PJRT_Device_AddressableMemories) X(PJRT_Device_DefaultMemory) X(PJRT_Device_MemoryStats)  \
  X(PJRT_Memory_Id) X(PJRT_Memory_Kind) X(PJRT_Memory_DebugString) X(PJRT_Memory_ToString)    \
  X(PJRT_Memory_AddressableByDevices)                                                        \
  X(PJRT_Executable_Destroy) X(PJRT_Executable_Name) X(PJRT_Executable_NumReplicas)           \
  X(PJRT_Executable_NumPartitions) X(PJRT_Executable_NumOutputs)                             \
  X(PJRT_Executable_SizeOfGeneratedCodeInBytes) X(PJRT_Executable_GetCostAnalysis)           \
  X(PJRT_Executable_OutputMemoryKinds) X(PJRT_Executable_OptimizedProgram)                   \
  X(PJRT_Executable_Serialize)                                                               \
  X(PJRT_LoadedExecutable_Destroy) X(PJRT_LoadedExecutable_GetExecutable)                    \
  X(PJRT_LoadedExecutable_AddressableDevices) X(PJRT_LoadedExecutable_Delete)                \
  X(PJRT_LoadedExecutable_IsDeleted) X(PJRT_LoadedExecutable_Execute)                        \
  X(PJRT_Executable_DeserializeAndLoad) X(PJRT_LoadedExecutable_Fingerprint)                 \
  X(PJRT_Buffer_Destroy) X(PJRT_Buffer_ElementType) X(PJRT_Buffer_Dimensions)                 \
  X(PJRT_Buffer_UnpaddedDimensions) X(PJRT_Buffer_DynamicDimensionIndices)                   \
  X(PJRT_Buffer_GetMemoryLayout) X(PJRT_Buffer_OnDeviceSizeInBytes) X(PJRT_Buffer_Device)     \
  X(PJRT_Buffer_Memory) X(PJRT_Buffer_Delete) X(PJRT_Buffer_IsDeleted)                        \
  X(PJRT_Buffer_CopyToDevice) X(PJRT_Buffer_ToHostBuffer) X(PJRT_Buffer_IsOnCpu)              \
  X(PJRT_Buffer_ReadyEvent) X(PJRT_Buffer_UnsafePointer)                                     \
  X(PJRT_Buffer_IncreaseExternalReferenceCount) X(PJRT_Buffer_DecreaseExternalReferenceCount) \
  X(PJRT_Buffer_OpaqueDeviceMemoryDataPointer)                                               \
  X(PJRT_CopyToDeviceStream_Destroy) X(PJRT_CopyToDeviceStream_AddChunk)                     \
  X(PJRT_CopyToDeviceStream_TotalBytes) X(PJRT_CopyToDeviceStream_GranuleSize)               \
  X(PJRT_CopyToDeviceStream_CurrentBytes)                                                    \
  X(PJRT_TopologyDescription_Create) X(PJRT_TopologyDescription_Destroy)                     \
  X(PJRT_TopologyDescription_PlatformName) X(PJRT_TopologyDescription_PlatformVersion)       \
  X(PJRT_TopologyDescription_GetDeviceDescriptions) X(PJRT_TopologyDescription_Serialize)    \
  X(PJRT_TopologyDescription_Attributes)                                                     \
  X(PJRT_Compile)                                                                            \
  X(PJRT_Executable_OutputElementTypes) X(PJRT_Executable_OutputDimensions)                  \
  X(PJRT_Buffer_CopyToMemory) X(PJRT_Client_CreateViewOfDeviceBuffer)                        \
  X(PJRT_Executable_Fingerprint) X(PJRT_Client_TopologyDescription)                          \
  X(PJRT_Executable_GetCompiledMemoryStats) X(PJRT_Memory_Kind_Id)                           \
  X(PJRT_ExecuteContext_Create) X(PJRT_ExecuteContext_Destroy) X(PJRT_Buffer_CopyRawToHost)   \
  X(PJRT_AsyncHostToDeviceTransferManager_Destroy)                                           \
  X(PJRT_AsyncHostToDeviceTransferManager_TransferData)                                      \
  X(PJRT_Client_CreateBuffersForAsyncHostToDevice)                                           \
  X(PJRT_AsyncHostToDeviceTransferManager_RetrieveBuffer)                                    \
  X(PJRT_AsyncHostToDeviceTransferManager_Device)                                            \
  X(PJRT_AsyncHostToDeviceTransferManager_BufferCount)                                       \
  X(PJRT_AsyncHostToDeviceTransferManager_BufferSize)                                        \
  X(PJRT_AsyncHostToDeviceTransferManager_SetBufferError)                                    \
  X(PJRT_AsyncHostToDeviceTransferManager_AddMetadata)                                       \
  X(PJRT_Client_DmaMap) X(PJRT_Client_DmaUnmap)                                              \
  X(PJRT_Client_CreateUninitializedBuffer) X(PJRT_Client_UpdateGlobalProcessInfo)            \
  X(PJRT_TopologyDescription_Deserialize) X(PJRT_Client_CreateAliasBuffer)                   \
  X(PJRT_Client_FulfillAliasBuffer) X(PJRT_LoadedExecutable_GetDeviceAssignment)             \
  X(PJRT_Client_CreateErrorBuffer) X(PJRT_AsyncHostToDeviceTransferManager_TransferLiteral)  \
  X(PJRT_Buffer_CopyRawToHostFuture) X(PJRT_Device_PoisonExecution)                          \
  X(PJRT_Device_CreateAsyncTrackingEvent) X(PJRT_AsyncTrackingEvent_Destroy)                 \
  X(PJRT_Executable_GetCompileOptions) X(PJRT_Buffer_DonateWithControlDependency)            \
  X(PJRT_Event_Create) X(PJRT_Event_Set) X(PJRT_Device_GetAttributes)

/* Every slot is stored as this type; each function is cast to it (the caller calls it with
 * its own argument struct). PJRT_Error_Destroy and PJRT_Error_Message return void. */
typedef PJRT_Error *(*pjrt_fn)(void *args);

typedef struct PJRT_Api {
  size_t struct_size;
  void *extension_start;
  struct {
    size_t struct_size;
    void *extension_start;
    int major_version, minor_version;
  } pjrt_api_version;
#define X(name) pjrt_fn name;
  PJRT_API_SLOTS(X)
#undef X
} PJRT_Api;

#undef PJRT_HEAD
#endif
