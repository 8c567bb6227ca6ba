# Installation and the Debian package (CPack). The installed binaries carry their own LibTorch: the libraries they
# load from the torch wheel (libtorch_cpu, libc10, libgomp and, for a CUDA wheel, the CUDA runtime and CUPTI) are
# copied into <prefix>/lib/kvscope and found through RUNPATH $ORIGIN/../lib/kvscope. Qt, QCustomPlot, PCRE2 and fmt
# come from Debian packages (the .deb depends on them).
include(GNUInstallDirs)

set(_kv_private_lib "${CMAKE_INSTALL_LIBDIR}/kvscope")
foreach(_t kvscope kvscope-cli)
  if(TARGET ${_t})
    set_target_properties(${_t} PROPERTIES INSTALL_RPATH "$ORIGIN/../${_kv_private_lib}")
  endif()
endforeach()

# The wheel's libraries (and what they pull in outside the system's library directories) next to the binaries.
set(_kv_exes "$<TARGET_FILE:kvscope-cli>")
if(TARGET kvscope)
  string(APPEND _kv_exes ";$<TARGET_FILE:kvscope>")
endif()
install(CODE "
  file(GET_RUNTIME_DEPENDENCIES
       EXECUTABLES ${_kv_exes}
       RESOLVED_DEPENDENCIES_VAR _kv_deps
       UNRESOLVED_DEPENDENCIES_VAR _kv_missing
       CONFLICTING_DEPENDENCIES_PREFIX _kv_conflict
       DIRECTORIES \"${KVSCOPE_TORCH_DIR}/lib\"
       POST_EXCLUDE_REGEXES \"^/lib\" \"^/usr/lib\" \"^/lib64\" \"^/usr/lib64\")
  if(_kv_missing)
    message(FATAL_ERROR \"kvscope install: unresolved libraries: \${_kv_missing}\")
  endif()
  # One soname found twice (the CUDA runtime: the toolkit's, that the kernels link, and the wheel's): the same ABI,
  # one copy.
  foreach(_n IN LISTS _kv_conflict_FILENAMES)
    list(GET _kv_conflict_\${_n} 0 _first)
    list(APPEND _kv_deps \"\${_first}\")
  endforeach()
  foreach(_d IN LISTS _kv_deps)
    file(INSTALL \"\${_d}\" DESTINATION \"\${CMAKE_INSTALL_PREFIX}/${_kv_private_lib}\" FOLLOW_SYMLINK_CHAIN)
  endforeach()
")

install(FILES ${PROJECT_SOURCE_DIR}/resources/eval/coriolanus.txt ${PROJECT_SOURCE_DIR}/resources/eval/README.md
        DESTINATION ${CMAKE_INSTALL_DATADIR}/kvscope/eval)
install(FILES ${PROJECT_SOURCE_DIR}/packaging/kvscope.desktop DESTINATION ${CMAKE_INSTALL_DATADIR}/applications)
install(FILES ${PROJECT_SOURCE_DIR}/resources/kvscope.svg
        DESTINATION ${CMAKE_INSTALL_DATADIR}/icons/hicolor/scalable/apps)

# The embedded model, when it is on this machine (packaging/setup.sh fetches it): the installed app starts on it.
set(KVSCOPE_PACKAGE_MODEL "$ENV{HOME}/.cache/kvscope/model/SmolLM2-135M-Instruct.Q4_1.gguf" CACHE FILEPATH
    "GGUF model installed to share/kvscope/models (empty or missing: none; the app then asks for one)")
if(KVSCOPE_PACKAGE_MODEL AND EXISTS "${KVSCOPE_PACKAGE_MODEL}")
  install(FILES "${KVSCOPE_PACKAGE_MODEL}" DESTINATION ${CMAKE_INSTALL_DATADIR}/kvscope/models COMPONENT model)
endif()

set(CPACK_GENERATOR "DEB")
set(CPACK_PACKAGE_NAME "kvscope")
set(CPACK_PACKAGE_VENDOR "kvscope")
set(CPACK_PACKAGE_CONTACT "kvscope developers <kvscope@localhost>")
set(CPACK_PACKAGE_DESCRIPTION_SUMMARY "Quantized KV-cache workbench: run a local LLM with an FP8/int KV cache and watch it")
set(CPACK_PACKAGE_INSTALL_DIRECTORY "kvscope")
set(CPACK_PACKAGING_INSTALL_PREFIX "/usr")
set(CPACK_DEBIAN_FILE_NAME DEB-DEFAULT)
set(CPACK_DEBIAN_PACKAGE_SECTION "science")
set(CPACK_DEBIAN_PACKAGE_DEPENDS
    "libc6, libstdc++6, libgcc-s1, libqt6core6 (>= 6.4), libqt6gui6 (>= 6.4), libqt6widgets6 (>= 6.4), libqt6printsupport6 (>= 6.4), qt6-qpa-plugins, libqcustomplot2.1-qt6, libpcre2-8-0, libfmt9")
# gzip: fast on two cores for ~0.5 GB of LibTorch, and every dpkg reads it.
set(CPACK_DEBIAN_COMPRESSION_TYPE "gzip")
include(CPack)
