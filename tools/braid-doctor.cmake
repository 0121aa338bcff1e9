# braid-doctor: the preflight check of a machine for braid jobs
# (docs/DOCTOR.md); its checks are in the library (src/doctor*.c).
add_executable(braid-doctor ${CMAKE_CURRENT_SOURCE_DIR}/braid-doctor.c)
target_link_libraries(braid-doctor PRIVATE braid_internal)
install(TARGETS braid-doctor RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
