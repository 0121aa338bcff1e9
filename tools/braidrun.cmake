# braidrun: the local launcher (docs/LAUNCH.md).
add_executable(braidrun ${CMAKE_CURRENT_SOURCE_DIR}/braidrun.c)
target_compile_definitions(braidrun PRIVATE _GNU_SOURCE)
target_link_libraries(braidrun PRIVATE braid)
# Finds libbraid next to it after installation, whatever the prefix.
set_target_properties(braidrun PROPERTIES
  INSTALL_RPATH "$ORIGIN/../${CMAKE_INSTALL_LIBDIR}")
install(TARGETS braidrun RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
