# Debian packages (cpack -G DEB; scripts/package.sh builds them, README.md "Install"):
#   libbraid0            the shared library
#   libbraid-dev         header, static library, pkg-config file, CMake package
#   braid-tools          braidrun, braid-topo, braid-perf and its nccl-tests
#                        names, braid-doctor, braid-trace, braid-trainer, the
#                        machine models
#   python3-braid-torch  the torch.distributed backend (when it is built)
# Each install rule names its component; one that names none is a tool's
# (CMAKE_INSTALL_DEFAULT_COMPONENT_NAME). Dependencies on Debian's libraries
# come from dpkg-shlibdeps; those between braid's packages are pinned to the
# same version.
set(CPACK_PACKAGE_NAME braid)
set(CPACK_PACKAGE_VENDOR "braid")
set(CPACK_PACKAGE_CONTACT "braid maintainers <braid@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
  "collective communication for host and device buffers")
set(CPACK_PACKAGE_VERSION ${PROJECT_VERSION})
set(CPACK_DEBIAN_PACKAGE_RELEASE 1)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEB_COMPONENT_INSTALL ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_DEBIAN_PACKAGE_SECTION libs)
set(CPACK_DEBIAN_PACKAGE_PRIORITY optional)

set(braid_deb_version "${PROJECT_VERSION}-${CPACK_DEBIAN_PACKAGE_RELEASE}")
set(CPACK_DEBIAN_LIB_PACKAGE_NAME libbraid0)
set(CPACK_DEBIAN_DEV_PACKAGE_NAME libbraid-dev)
set(CPACK_DEBIAN_TOOLS_PACKAGE_NAME braid-tools)
set(CPACK_DEBIAN_TORCH_PACKAGE_NAME python3-braid-torch)
set(CPACK_DEBIAN_DEV_PACKAGE_SECTION libdevel)
set(CPACK_DEBIAN_TOOLS_PACKAGE_SECTION net)
set(CPACK_DEBIAN_TORCH_PACKAGE_SECTION python)
set(CPACK_COMPONENT_LIB_DESCRIPTION
  "braid: collective communication library (shared library)")
set(CPACK_COMPONENT_DEV_DESCRIPTION
  "braid: header, static library, pkg-config file and CMake package")
set(CPACK_COMPONENT_TOOLS_DESCRIPTION
  "braid: braidrun, braid-topo, braid-perf, braid-doctor, braid-trace, braid-trainer")
set(CPACK_COMPONENT_TORCH_DESCRIPTION
  "braid: the torch.distributed backend \"braid\" (import braid_torch)")
# The packages that use libbraid.so.0 depend on this very build of it;
# dpkg-shlibdeps adds the Debian libraries each one links. The static
# library's users link libbraid's own link-time dependencies (braid.pc's
# Libs.private, the CMake package's braid::braid_static): the -dev package
# pulls in their development packages. libfabric is not one: it is opened
# at run time (below).
set(CPACK_DEBIAN_DEV_PACKAGE_DEPENDS
  "libbraid0 (= ${braid_deb_version}), libhwloc-dev, libibverbs-dev")
set(CPACK_DEBIAN_TOOLS_PACKAGE_DEPENDS "libbraid0 (= ${braid_deb_version})")
# libfabric is opened at run time, when a communicator spans hosts
# (transports/ofi/ofi_lib.c), so dpkg-shlibdeps does not see it: without
# it the ofi transport reports itself unavailable and tcp serves.
set(CPACK_DEBIAN_LIB_PACKAGE_RECOMMENDS "libfabric1")
set(CPACK_DEBIAN_TORCH_PACKAGE_DEPENDS
  "libbraid0 (= ${braid_deb_version}), python3-torch")
# dpkg-shlibdeps must find libbraid.so.0 for the packages that link it: the
# library's own staging directory, and a shlibs entry that maps it to
# libbraid0 (generated for the library's package).
set(CPACK_DEBIAN_PACKAGE_GENERATE_SHLIBS ON)
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS_PRIVATE_DIRS
  "${CMAKE_BINARY_DIR}")
set(CPACK_GENERATOR DEB)
include(CPack)
