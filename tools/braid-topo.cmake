# braid-topo: show, render and convert machine topologies (topology/), and
# show, verify, time, save and draw schedules (collectives/).
add_executable(braid-topo ${CMAKE_CURRENT_SOURCE_DIR}/braid-topo.c
  ${CMAKE_CURRENT_SOURCE_DIR}/topo_dot.c
  ${CMAKE_CURRENT_SOURCE_DIR}/topo_schedule.c
  ${CMAKE_CURRENT_SOURCE_DIR}/topo_import.c)
target_link_libraries(braid-topo PRIVATE braid_internal)
install(TARGETS braid-topo RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
