# Installation (GNUInstallDirs) and the Debian package (CPack).
#
#   cmake --install build [--prefix /usr/local]
#     bin/unroll, share/man/man1/unroll.1, share/bash-completion/completions/unroll,
#     share/zsh/site-functions/_unroll
#   cpack --config build/CPackConfig.cmake -G DEB     ->  unroll_<version>_amd64.deb
#
# Under scikit-build-core (pip wheel, pyproject.toml) only the binary is installed, into the
# wheel's scripts directory, so that `pip install` puts `unroll` on PATH.

# The man page is kept as roff source in docs/ and rendered into the build tree with the
# version filled in.
configure_file(${PROJECT_SOURCE_DIR}/docs/unroll.1.in ${PROJECT_BINARY_DIR}/unroll.1 @ONLY)

if(SKBUILD)
  install(TARGETS unroll RUNTIME DESTINATION ${SKBUILD_SCRIPTS_DIR})
  return()
endif()

install(TARGETS unroll RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR})
install(FILES ${PROJECT_BINARY_DIR}/unroll.1 DESTINATION ${CMAKE_INSTALL_MANDIR}/man1)
install(FILES ${PROJECT_SOURCE_DIR}/completions/unroll.bash
        DESTINATION ${CMAKE_INSTALL_DATADIR}/bash-completion/completions RENAME unroll)
install(FILES ${PROJECT_SOURCE_DIR}/completions/_unroll
        DESTINATION ${CMAKE_INSTALL_DATADIR}/zsh/site-functions)
install(FILES ${PROJECT_SOURCE_DIR}/LICENSE ${PROJECT_SOURCE_DIR}/README.md
        DESTINATION ${CMAKE_INSTALL_DOCDIR})

# ---- Debian package ----------------------------------------------------------------------
set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "unroll")
set(CPACK_PACKAGE_VERSION "${PROJECT_VERSION}")
set(CPACK_PACKAGE_CONTACT "unroll maintainers <unroll@invalid>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY
    "convert scanned MaxText/Orbax checkpoints to unscanned param-only bfloat16 ones")
set(CPACK_DEBIAN_PACKAGE_DESCRIPTION
    "unroll reads a scanned MaxText training checkpoint (Orbax: TensorStore OCDBT, zarr,\nJSON metadata) and writes the unscanned, param-only bfloat16 checkpoint that MaxText's\ngenerate_param_only_checkpoint.py writes with force_unroll=true, on any CPU machine,\nin bounded memory.")
set(CPACK_STRIP_FILES ON)
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)          # unroll_<version>_<arch>.deb
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_LICENSE "Apache-2.0")
# Runtime dependencies from the linked shared libraries (dpkg-shlibdeps: libzstd1,
# libcjson1, libyaml-0-2, zlib1g, libc6 with the versions they were built against).
set(CPACK_DEBIAN_PACKAGE_SHLIBDEPS ON)
set(CPACK_PACKAGE_INSTALL_DIRECTORY "unroll")
set(CPACK_SET_DESTDIR OFF)
if(NOT DEFINED CPACK_PACKAGING_INSTALL_PREFIX)
  set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
endif()
include(CPack)
