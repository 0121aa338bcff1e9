# Device-buffer tests (issue 7), included by tests/cuda/CMakeLists.txt.
#
# gpu_nodev runs everywhere (CI has no GPU): braid_stream_from_cuda must say
# BRAID_ERR_UNSUPPORTED and why. The others need a CUDA build and skip
# loudly without a device ("no CUDA device: <reason>"): the matrix ranks and
# the Criterion programs (tests/criterion_main.c) exit 77, which ctest
# reports as a skip (SKIP_RETURN_CODE: tests/CMakeLists.txt).
set(gpu_dir ${CMAKE_CURRENT_LIST_DIR})

add_executable(test_gpu_nodev ${gpu_dir}/test_gpu_nodev.c)
target_link_libraries(test_gpu_nodev PRIVATE braid_internal
  PkgConfig::CRITERION)
add_test(NAME gpu_nodev COMMAND test_gpu_nodev --jobs 1)
set_tests_properties(gpu_nodev PROPERTIES TIMEOUT 60 LABELS "cuda")

if(NOT BRAID_HAVE_CUDA_BUILD)
  return()
endif()

set(gpu_cudart CUDA::cudart_static)
if(NOT TARGET CUDA::cudart_static)
  set(gpu_cudart CUDA::cudart)
endif()

# gpu_program(<program> <source> <libraries...>): a Criterion program of
# tests/cuda, linked with libbraid's objects and libcudart (test_*) or the
# emulated GPU (emu_*).
function(gpu_program program source)
  add_executable(${program} ${gpu_dir}/${source})
  target_include_directories(${program} PRIVATE ${gpu_dir})
  target_link_libraries(${program} PRIVATE ${ARGN} PkgConfig::CRITERION)
endfunction()
# Tests run with braid's defaults, the device path users take: allreduce,
# reduce, broadcast, allgather and reduce_scatter as collective kernels,
# the other collectives' small calls through pinned host memory
# (src/config.c). A test of another path says which in its environment:
# ${gpu_direct} for the direct (and staged) path, BRAID_CUDA_KERNEL_MAX=0
# with a BRAID_CUDA_HOST_MAX for the host path, a BRAID_CUDA_KERNEL_MAX
# for kernels up to a size and the direct path above it.
set(gpu_direct BRAID_CUDA_KERNEL_MAX=0 BRAID_CUDA_HOST_MAX=0)
# gpu_test(<test> <program> [VAR=value...] [--option=value...]): the ctest
# that runs <program> one test at a time with BRAID_TIMEOUT=60 and the
# variables given (the --options: arguments of the program, --filter=...);
# on the emulated GPU for emu_* programs, else on a GPU (skipped without
# one).
function(gpu_test test program)
  set(env BRAID_TIMEOUT=60)
  set(args)
  foreach(a ${ARGN})
    if(a MATCHES "^--")
      list(APPEND args ${a})
    else()
      list(APPEND env ${a})
    endif()
  endforeach()
  add_test(NAME ${test} COMMAND ${program} --jobs 1 ${args})
  set_tests_properties(${test} PROPERTIES TIMEOUT 300 ENVIRONMENT "${env}")
  if(program MATCHES "^emu_")
    set_tests_properties(${test} PROPERTIES LABELS "cuda;emu")
  else()
    set_tests_properties(${test} PROPERTIES LABELS "cuda;gpu")
  endif()
endfunction()

# Stream order (test_gpu_stream.c) of the calls braid runs on its own
# stream (the direct path: gates, waits for the user's stream); with its
# calls small enough to go through pinned host memory (the host path);
# with every stream on one hardware queue (direct: gated calls then wait in
# the calling thread, BRAID_CUDA_GATE's default there, docs/CUDA.md); with
# calls up to 64 KiB as collective kernels (src/exec_kernel.c) and the
# larger ones direct. Sharing a GPU (test_gpu_share.c: more streams than
# hardware queues, two communicators with kernels at once) on the direct
# path and with the defaults (collective kernels). Calls refused on device
# buffers (test_gpu_args.c: past their allocation, on a capturing stream),
# with the defaults.
gpu_program(test_gpu_stream test_gpu_stream.c braid_internal ${gpu_cudart})
gpu_program(test_gpu_share test_gpu_share.c braid_internal ${gpu_cudart})
gpu_program(test_gpu_args test_gpu_args.c braid_internal ${gpu_cudart})
gpu_test(gpu_stream test_gpu_stream ${gpu_direct})
gpu_test(gpu_stream_small test_gpu_stream BRAID_CUDA_KERNEL_MAX=0
  BRAID_CUDA_HOST_MAX=8M)
gpu_test(gpu_stream_one_queue test_gpu_stream ${gpu_direct}
  CUDA_DEVICE_MAX_CONNECTIONS=1)
gpu_test(gpu_stream_kernel test_gpu_stream BRAID_CUDA_KERNEL_MAX=64K
  BRAID_CUDA_HOST_MAX=0)
gpu_test(gpu_share test_gpu_share ${gpu_direct})
gpu_test(gpu_share_kernel test_gpu_share)
gpu_test(gpu_args test_gpu_args)
# Pre-multiplied sums on device buffers (test_gpu_premul.c). Its suite
# gpu_wide: float16, bfloat16 and float8_e4m3 sums and averages rounded
# once by the collective kernel (braid's defaults: gpu_wide), at each step
# with braid_config.deterministic and on the other paths (the gpu_premul
# tests).
gpu_program(test_gpu_premul test_gpu_premul.c braid_internal ${gpu_cudart})
gpu_test(gpu_premul test_gpu_premul ${gpu_direct})
gpu_test(gpu_wide test_gpu_premul --filter=gpu_wide/*)

# The collective kernel in one process against a reference computed on the
# host (test_gpu_kcoll.c): gpu_kcoll runs kernels.cu, emu_kcoll (below) the
# emulated GPU's kernel, on the same inputs and expected bytes.
gpu_program(test_gpu_kcoll test_gpu_kcoll.c braid_internal ${gpu_cudart})
gpu_test(gpu_kcoll test_gpu_kcoll)

# The correctness matrix of tests/core on device buffers: coll_matrix.c,
# unchanged, with test_gpu_matrix.h force-included (its wrappers move every
# call's buffers to the GPU and back). Blocking calls, and calls on a wrapped
# CUDA stream.
set(BRAID_GPU_MATRIX_COUNTS "0,1,7,1023,262147" CACHE STRING
  "element counts of the device-buffer correctness matrix")
# gpu_matrix_tests(<prefix> <counts> <labels> <link libraries...>): the
# executables <prefix>_{blocking,stream} and the tests <prefix>_<mode>_{1,2,4}
# and <prefix>_blocking_tcp_2 (device buffers staged over tcp).
function(gpu_matrix_tests prefix counts labels)
  foreach(mode blocking stream)
    set(exe ${prefix}_${mode})
    add_executable(${exe} ${PROJECT_SOURCE_DIR}/tests/core/coll_matrix.c)
    target_compile_options(${exe} PRIVATE
      -include ${gpu_dir}/test_gpu_matrix.h)
    if(mode STREQUAL "stream")
      target_compile_definitions(${exe} PRIVATE GPU_MATRIX_STREAM)
    endif()
    target_link_libraries(${exe} PRIVATE coll_values ${ARGN})
  endforeach()
  if(NOT TARGET braidrun)
    return()
  endif()
  # stream_small_3: calls up to 4 KiB go through pinned host memory
  # (BRAID_CUDA_HOST_MAX), staged on the CUDA stream by ranks 0 and 2 and
  # by the progress thread of rank 1, which issues blocking calls: every
  # rank must take the same path for a call. stream_kernel_3: allreduce,
  # reduce, broadcast, allgather and reduce_scatter calls up to 1 MiB run
  # as kernels (BRAID_CUDA_KERNEL_MAX), launched on
  # the CUDA stream by ranks 0 and 2 and on the internal stream by rank 1;
  # slots of 256 KiB: the largest calls take several chunks and 4 blocks
  # (2 on the emulated GPU, which says it holds only 12 of them).
  # {blocking,stream}_{1,2,4}: braid's defaults, the device path users
  # take (collective kernels, small calls of the other collectives through
  # host memory: src/config.c); {blocking,stream}_direct_{2,4}: the direct
  # path (gpu_direct), kernels and the host path off; blocking_tcp_2: staged
  # over tcp (no collective kernels without the cuda transport; pinned off
  # all the same).
  foreach(run blocking_1 blocking_2 blocking_4 stream_1 stream_2 stream_4
          blocking_direct_2 blocking_direct_4 stream_direct_2
          stream_direct_4 blocking_tcp_2 stream_small_3 stream_kernel_3)
    string(REGEX MATCH "^[a-z]+" mode ${run})
    string(REGEX MATCH "[0-9]+$" n ${run})
    set(env "BRAID_TIMEOUT=120")
    if(run MATCHES "_tcp_")
      set(env "BRAID_TRANSPORT=tcp;BRAID_TIMEOUT=120;${gpu_direct}")
    elseif(run MATCHES "_direct_")
      set(env "BRAID_TIMEOUT=120;${gpu_direct}")
    elseif(run MATCHES "_small_")
      # the host path: kernels off
      set(env "BRAID_CUDA_HOST_MAX=4K;GPU_MATRIX_BLOCKING_RANK=1")
      list(APPEND env "BRAID_CUDA_KERNEL_MAX=0;BRAID_TIMEOUT=120")
    elseif(run MATCHES "_kernel_")
      # the emulated GPU holds 12 kernel blocks: 2 per call for 3 ranks
      set(env "BRAID_CUDA_KERNEL_MAX=1M;BRAID_CUDA_KERNEL_SLOT=256K")
      list(APPEND env "CUDA_EMU_KERNEL_ROOM=12;BRAID_CUDA_HOST_MAX=0")
      list(APPEND env "GPU_MATRIX_BLOCKING_RANK=1")
      list(APPEND env "BRAID_TIMEOUT=120")
    endif()
    add_test(NAME ${prefix}_${run}
      COMMAND $<TARGET_FILE:braidrun> -n ${n} --timeout 900
              $<TARGET_FILE:${prefix}_${mode}> --counts ${counts})
    set_tests_properties(${prefix}_${run} PROPERTIES ENVIRONMENT "${env}"
      TIMEOUT 900 SKIP_RETURN_CODE 77 LABELS "${labels}")
  endforeach()
endfunction()
gpu_matrix_tests(gpu_matrix "${BRAID_GPU_MATRIX_COUNTS}" "cuda;gpu;matrix"
  braid_internal ${gpu_cudart} m)

# ---- the device path on an emulated GPU (tests/cuda/emu/cuda_emu.c) ----
# No GPU needed: libbraid's objects are linked with a device layer and a
# CUDA runtime made of host memory and worker threads instead of dev.c,
# kernels.cu and libcudart, and the matrix and stream tests above run on it
# in every build with the CUDA toolkit (CI included). They check braid's
# own device-side code (classification, the executor's device path, stream
# gates, the cuda IPC transport, staging over tcp) and the collective
# kernel's per-chunk logic (device/kcoll_chunk.h, which emu_kernel.c runs
# as kernels.cu does), not CUDA or the GPU code itself.
add_library(braid_emu STATIC $<TARGET_OBJECTS:braid_obj>
  ${gpu_dir}/emu/cuda_emu.c ${gpu_dir}/emu/cuda_emu_mem.c
  ${gpu_dir}/emu/cuda_emu_dev.c ${gpu_dir}/emu/emu_kernel.c)
target_include_directories(braid_emu PUBLIC ${PROJECT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/include ${CUDAToolkit_INCLUDE_DIRS})
target_compile_definitions(braid_emu PRIVATE _GNU_SOURCE BRAID_BUILD)
target_link_libraries(braid_emu PUBLIC ${braid_obj_deps} Threads::Threads m)

# Kernel registration and launch stubs for programs with CUDA kernels of
# their own (tests/trainer_cuda): an object library, as nothing in braid_emu
# refers to them.
add_library(braid_emu_launch OBJECT ${gpu_dir}/emu/cuda_emu_launch.c)
target_include_directories(braid_emu_launch PRIVATE ${PROJECT_SOURCE_DIR}
  ${PROJECT_SOURCE_DIR}/include ${CUDAToolkit_INCLUDE_DIRS})

set(BRAID_EMU_MATRIX_COUNTS "0,1,7,1023,65539" CACHE STRING
  "element counts of the correctness matrix on the emulated GPU")
gpu_matrix_tests(emu_matrix "${BRAID_EMU_MATRIX_COUNTS}" "cuda;emu;matrix"
  braid_emu)

# The same programs on the emulated GPU.
gpu_program(emu_gpu_stream test_gpu_stream.c braid_emu)
gpu_program(emu_gpu_share test_gpu_share.c braid_emu)
gpu_program(emu_gpu_args test_gpu_args.c braid_emu)
# gates (BRAID_CUDA_GATE=1, off by default: docs/CUDA.md) on the emulated
# GPU, whose streams each have a hardware queue of their own
gpu_test(emu_gpu_stream emu_gpu_stream ${gpu_direct} BRAID_CUDA_GATE=1)
gpu_test(emu_gpu_stream_small emu_gpu_stream BRAID_CUDA_KERNEL_MAX=0
  BRAID_CUDA_HOST_MAX=8M)
gpu_test(emu_gpu_stream_kernel emu_gpu_stream BRAID_CUDA_KERNEL_MAX=64K
  BRAID_CUDA_HOST_MAX=0)
# Every stream on one hardware queue (the emulated GPU runs their work in
# issue order, an operation that waits holding the rest): calls that braid
# runs on its own stream wait for the user's stream in the calling thread
# instead of holding it at a gate (BRAID_CUDA_GATE=0, the default). With
# gates forced on (BRAID_CUDA_GATE=1) the same tests time out.
gpu_test(emu_gpu_stream_one_queue emu_gpu_stream ${gpu_direct}
  CUDA_DEVICE_MAX_CONNECTIONS=1)
# A call on a CUDA stream that goes as collective kernels while host-stream
# calls that may launch theirs are queued, with every stream on one
# hardware queue and gates forced on: it must wait for them and launch on
# the user's stream, not go behind a gate and launch on braid's (which the
# held queue would never run: BRAID_TIMEOUT).
add_test(NAME emu_gpu_stream_deferred_kernel COMMAND emu_gpu_stream --jobs 1
  --filter "gpu_stream/host_and_cuda_streams_interleaved")
set(env BRAID_TIMEOUT=20 BRAID_CUDA_KERNEL_MAX=64K BRAID_CUDA_HOST_MAX=0
  CUDA_DEVICE_MAX_CONNECTIONS=1 BRAID_CUDA_GATE=1)
set_tests_properties(emu_gpu_stream_deferred_kernel PROPERTIES TIMEOUT 120
  LABELS "cuda;emu" ENVIRONMENT "${env}")
# gates of shared hardware queues: the direct path
gpu_test(emu_gpu_share emu_gpu_share ${gpu_direct} BRAID_CUDA_GATE=1)
# the defaults (collective kernels) with kernels of at most 6 blocks
# (BRAID_CUDA_KERNEL_BLOCKS): two_comms wants 6 for both communicators where
# their room alone gives 16 and 8
gpu_test(emu_gpu_share_kernel emu_gpu_share BRAID_CUDA_KERNEL_BLOCKS=6)
# BRAID_CUDA_KERNEL_BLOCKS unset: two ranks on one GPU share its SMs (132
# on the emulated GPU), 64 blocks each (the power of two within 66) for
# both communicators where a room of 1056 blocks would allow 264 and 132
add_test(NAME emu_gpu_share_blocks COMMAND emu_gpu_share --jobs 1
  --filter "gpu_share/two_communicators_share_the_gpu")
set(env BRAID_TIMEOUT=60 CUDA_EMU_KERNEL_ROOM=1056)
set_tests_properties(emu_gpu_share_blocks PROPERTIES TIMEOUT 120
  LABELS "cuda;emu" ENVIRONMENT "${env}")
gpu_test(emu_gpu_args emu_gpu_args)
# Pre-multiplied sums on device buffers: through the executor's device
# paths; small calls staged through pinned host memory (blocking and on the
# stream); sizes that would go as collective kernels, which pre-multiplied
# sums do not take. Each names its path. The suite gpu_wide in each of them
# (narrow floats rounded at each step; rounded once in the collective
# kernels of emu_gpu_premul_kernel), and alone with braid's defaults.
gpu_program(emu_gpu_premul test_gpu_premul.c braid_emu)
gpu_test(emu_gpu_premul emu_gpu_premul ${gpu_direct})
gpu_test(emu_gpu_premul_small emu_gpu_premul BRAID_CUDA_KERNEL_MAX=0
  BRAID_CUDA_HOST_MAX=8M)
gpu_test(emu_gpu_premul_kernel emu_gpu_premul BRAID_CUDA_KERNEL_MAX=64K
  BRAID_CUDA_HOST_MAX=0)
gpu_test(emu_gpu_wide emu_gpu_premul --filter=gpu_wide/*)
gpu_program(emu_kcoll test_gpu_kcoll.c braid_emu)
gpu_test(emu_kcoll emu_kcoll)

add_executable(emu_cuda_ipc ${PROJECT_SOURCE_DIR}/tests/transports/test_cuda_ipc.c
  ${PROJECT_SOURCE_DIR}/tests/transports/ranks.c)
target_link_libraries(emu_cuda_ipc PRIVATE braid_emu PkgConfig::CRITERION)
add_test(NAME emu_cuda_ipc COMMAND emu_cuda_ipc --jobs=1)
set_tests_properties(emu_cuda_ipc PROPERTIES TIMEOUT 120 LABELS "cuda;emu")

# Gates of a wrapped stream open in order, whichever order their work ends.
add_executable(emu_gates ${gpu_dir}/emu/test_emu_gates.c)
target_link_libraries(emu_gates PRIVATE braid_emu PkgConfig::CRITERION)
add_test(NAME emu_gates COMMAND emu_gates --jobs 1)
set_tests_properties(emu_gates PROPERTIES TIMEOUT 120 LABELS "cuda;emu")

# The emulated GPU's own rules: no host access to device memory, no
# cudaFree of memory another process has open.
add_executable(emu_memory ${gpu_dir}/emu/test_emu_memory.c)
target_link_libraries(emu_memory PRIVATE braid_emu PkgConfig::CRITERION)
add_test(NAME emu_memory COMMAND emu_memory --jobs 1)
set_tests_properties(emu_memory PROPERTIES TIMEOUT 60 LABELS "cuda;emu")

add_executable(emu_place ${gpu_dir}/emu/test_emu_place.c)
target_include_directories(emu_place PRIVATE ${gpu_dir})
target_compile_definitions(emu_place PRIVATE
  BRAID_MACHINES_DIR="${PROJECT_SOURCE_DIR}/topology/machines")
target_link_libraries(emu_place PRIVATE braid_emu PkgConfig::CRITERION)
add_test(NAME emu_place COMMAND emu_place --jobs 1)
# the direct path: its schedule file's channels are what it checks
set(env ${gpu_direct})
set_tests_properties(emu_place PROPERTIES TIMEOUT 120 LABELS "cuda;emu"
  ENVIRONMENT "${env}")

# Device calls plan on the ranks' GPUs when the topology places them (DGX-1
# model, four emulated GPUs): multi-ring, hybrid and tree packing run. The
# largest count: 262147 (BRAID_TEST_SMALL: 65539, which still makes plans
# of several channels for the 8-byte types).
if(TARGET braidrun)
  set(gpu_view_large 262147)
  if(BRAID_TEST_SMALL)
    set(gpu_view_large 65539)
  endif()
  add_test(NAME emu_gpu_view
    COMMAND ${gpu_dir}/emu/run_gpu_view.sh $<TARGET_FILE:braidrun>
            $<TARGET_FILE:emu_matrix_blocking> $<TARGET_FILE:emu_matrix_stream>
            ${PROJECT_SOURCE_DIR}/topology/machines ${gpu_view_large})
  # the direct path: the planner's channels on the GPUs are what it checks
  set(env ${gpu_direct})
  set_tests_properties(emu_gpu_view PROPERTIES TIMEOUT 600
    LABELS "cuda;emu;matrix" ENVIRONMENT "${env}")
endif()

# braid-perf's device buffers (-G 1) on the emulated GPU: the data is made,
# moved and checked on device memory (times mean nothing here).
add_executable(emu_braid_perf ${PROJECT_SOURCE_DIR}/perf/braid_perf.c
  ${PROJECT_SOURCE_DIR}/perf/cuda/perf_dev.c)
target_compile_definitions(emu_braid_perf PRIVATE _GNU_SOURCE)
target_link_libraries(emu_braid_perf PRIVATE braid_perf_core braid_emu)
if(TARGET braidrun)
  add_test(NAME emu_perf_device
    COMMAND $<TARGET_FILE:braidrun> -n 2 --timeout 300
            $<TARGET_FILE:emu_braid_perf> all -G 1 -b 8 -e 1M -f 32 -n 1 -w 1
            -c 1 -d all)
  # braid-perf exits 1 on a wrong element, 3 on a runtime error
  set_tests_properties(emu_perf_device PROPERTIES TIMEOUT 300
    LABELS "cuda;emu;perf")
  # pre-multiplied sums on device buffers, every dtype, checked exactly
  add_test(NAME emu_perf_device_premul
    COMMAND $<TARGET_FILE:braidrun> -n 3 --timeout 300
            $<TARGET_FILE:emu_braid_perf> all -G 1 -b 8 -e 256K -f 32 -n 1
            -w 1 -c 1 -d all -o premulsum -r all)
  set_tests_properties(emu_perf_device_premul PROPERTIES TIMEOUT 300
    LABELS "cuda;emu;perf")
endif()

add_executable(emu_faults ${gpu_dir}/emu/test_emu_faults.c)
target_include_directories(emu_faults PRIVATE ${gpu_dir})
target_link_libraries(emu_faults PRIVATE braid_emu PkgConfig::CRITERION)
# two at a time: most of its time is timeouts being waited out
add_test(NAME emu_faults COMMAND emu_faults --jobs 2)
# the direct path unless a test sets BRAID_CUDA_HOST_MAX or
# BRAID_CUDA_KERNEL_MAX itself (each path has tests of its own there)
set(env ${gpu_direct})
set_tests_properties(emu_faults PROPERTIES TIMEOUT 400 LABELS "cuda;emu"
  ENVIRONMENT "${env}")
