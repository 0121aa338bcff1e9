# braid-trace: reads the flight-recorder dumps of a job's ranks and names
# the likely culprit of a hang (docs/TRACE.md). Needs nothing of the library.
add_executable(braid-trace ${CMAKE_CURRENT_SOURCE_DIR}/braid-trace.c
  ${CMAKE_CURRENT_SOURCE_DIR}/trace_dump.c
  ${CMAKE_CURRENT_SOURCE_DIR}/trace_json.c
  ${CMAKE_CURRENT_SOURCE_DIR}/trace_words.c)
install(TARGETS braid-trace RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
