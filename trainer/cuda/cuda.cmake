# The CUDA LeNet of the reference trainer (trainer/cuda/), built with CUDA
# (BRAID_CUDA) unless BRAID_TRAINER_CUDA=OFF. The CPU trainer is unchanged.
option(BRAID_TRAINER_CUDA "Build the CUDA LeNet of the reference trainer (in a CUDA build)" ON)
if(BRAID_HAVE_CUDA_BUILD AND BRAID_TRAINER_CUDA)
  add_library(braid_trainer_cuda STATIC ${CMAKE_CURRENT_LIST_DIR}/lenet_cuda.cu)
  target_include_directories(braid_trainer_cuda PUBLIC ${CMAKE_CURRENT_LIST_DIR})
  target_link_libraries(braid_trainer_cuda PUBLIC braid_trainer_core
    CUDA::cudart_static)

  # braid-trainer-cuda: braid-trainer with the model on the GPU; the
  # command line and the training loop come from braid_trainer_core.
  add_executable(braid-trainer-cuda ${CMAKE_CURRENT_LIST_DIR}/main_cuda.c)
  target_link_libraries(braid-trainer-cuda PRIVATE braid_trainer_cuda
    CUDA::cudart_static)
  install(TARGETS braid-trainer-cuda RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
endif()
