# Device-buffer tests (issue 7), included by tests/cuda/CMakeLists.txt.
#
# gpu_nodev runs everywhere (CI has no GPU): braid_stream_from_cuda must say
# BRAID_ERR_UNSUPPORTED and why. The others need a CUDA build and skip
# loudly without a device ("no CUDA device: <reason>"): the matrix ranks exit
# 77 (SKIP_RETURN_CODE), the Criterion tests print "SKIP: no CUDA device".
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

add_executable(test_gpu_stream ${gpu_dir}/test_gpu_stream.c)
target_include_directories(test_gpu_stream PRIVATE ${gpu_dir})
target_link_libraries(test_gpu_stream PRIVATE braid_internal ${gpu_cudart}
  PkgConfig::CRITERION)
add_test(NAME gpu_stream COMMAND test_gpu_stream --jobs 1)
set_tests_properties(gpu_stream PROPERTIES TIMEOUT 300 LABELS "cuda;gpu"
  ENVIRONMENT "BRAID_TIMEOUT=60"
  SKIP_REGULAR_EXPRESSION "SKIP: no CUDA device")

# The correctness matrix of tests/core on device buffers: coll_matrix.c,
# unchanged, with test_gpu_matrix.h force-included (its wrappers move every
# call's buffers to the GPU and back). Blocking calls, and calls on a wrapped
# CUDA stream.
set(BRAID_GPU_MATRIX_COUNTS "0,1,7,1023,262147" CACHE STRING
  "element counts of the device-buffer correctness matrix")
foreach(mode blocking stream)
  set(exe gpu_matrix_${mode})
  add_executable(${exe} ${PROJECT_SOURCE_DIR}/tests/core/coll_matrix.c)
  target_compile_options(${exe} PRIVATE
    -include ${gpu_dir}/test_gpu_matrix.h)
  if(mode STREQUAL "stream")
    target_compile_definitions(${exe} PRIVATE GPU_MATRIX_STREAM)
  endif()
  target_link_libraries(${exe} PRIVATE braid_internal ${gpu_cudart} m)
  if(NOT TARGET braidrun)
    continue()
  endif()
  foreach(n 1 2 4)
    add_test(NAME gpu_matrix_${mode}_${n}
      COMMAND $<TARGET_FILE:braidrun> -n ${n} --timeout 900
              $<TARGET_FILE:${exe}> --counts ${BRAID_GPU_MATRIX_COUNTS})
    set_tests_properties(gpu_matrix_${mode}_${n} PROPERTIES
      ENVIRONMENT "BRAID_TIMEOUT=120" TIMEOUT 900 SKIP_RETURN_CODE 77
      LABELS "cuda;gpu;matrix")
  endforeach()
endforeach()
# Device buffers over a host transport: staged through host memory.
if(TARGET braidrun)
  add_test(NAME gpu_matrix_blocking_tcp_2
    COMMAND $<TARGET_FILE:braidrun> -n 2 --timeout 900
            $<TARGET_FILE:gpu_matrix_blocking> --counts ${BRAID_GPU_MATRIX_COUNTS})
  set_tests_properties(gpu_matrix_blocking_tcp_2 PROPERTIES
    ENVIRONMENT "BRAID_TRANSPORT=tcp;BRAID_TIMEOUT=120" TIMEOUT 900
    SKIP_RETURN_CODE 77 LABELS "cuda;gpu;matrix")
endif()
