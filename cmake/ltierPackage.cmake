# What `cmake --install` puts in the prefix besides the targets' own install()
# rules (api/ and tools/): the CMake package, lib/cmake/ltier/ (find_package(ltier)
# gives ltier::ltier and ltier::ltier_static), and lib/pkgconfig/ltier.pc.
# Included from the top-level CMakeLists.txt after api/ and tools/.
include(CMakePackageConfigHelpers)

set(LTIER_CMAKE_DIR ${CMAKE_INSTALL_LIBDIR}/cmake/ltier)
install(EXPORT ltierTargets NAMESPACE ltier:: FILE ltierTargets.cmake
        DESTINATION ${LTIER_CMAKE_DIR})
install(EXPORT ltierStaticTargets NAMESPACE ltier:: FILE ltierStaticTargets.cmake
        DESTINATION ${LTIER_CMAKE_DIR})

# What a user of libltier.a must link besides it (LTIER_STATIC_DEPS, set by
# api/CMakeLists.txt): as CMake packages for ltierConfig.cmake, as pkg-config
# terms for ltier.pc.
set(LTIER_STATIC_PACKAGES "")
set(LTIER_PC_REQUIRES_PRIVATE "")
set(LTIER_PC_LIBS_PRIVATE "")
foreach(d IN LISTS LTIER_STATIC_DEPS)
  if(d STREQUAL "Threads::Threads")
    list(APPEND LTIER_STATIC_PACKAGES Threads)
    list(APPEND LTIER_PC_LIBS_PRIVATE -pthread)
  elseif(d MATCHES "^yaml-cpp(::yaml-cpp)?$")
    list(APPEND LTIER_STATIC_PACKAGES yaml-cpp)
    pkg_check_modules(LTIER_PC_YAML_CPP QUIET yaml-cpp)
    if(LTIER_PC_YAML_CPP_FOUND)
      list(APPEND LTIER_PC_REQUIRES_PRIVATE yaml-cpp)
    else()
      list(APPEND LTIER_PC_LIBS_PRIVATE -lyaml-cpp)
    endif()
  elseif(d STREQUAL "sodium")
    pkg_check_modules(LTIER_PC_SODIUM QUIET libsodium)
    if(LTIER_PC_SODIUM_FOUND)
      list(APPEND LTIER_PC_REQUIRES_PRIVATE libsodium)
    else()
      list(APPEND LTIER_PC_LIBS_PRIVATE -lsodium)
    endif()
  elseif(d MATCHES "^prometheus-cpp::")
    list(APPEND LTIER_STATIC_PACKAGES prometheus-cpp)
    list(APPEND LTIER_PC_REQUIRES_PRIVATE prometheus-cpp-pull)
  elseif(TARGET ${d})
    message(FATAL_ERROR "cmake/ltierPackage.cmake: libltier.a's users must link ${d}; "
                        "add its CMake package and pkg-config terms here")
  elseif(IS_ABSOLUTE "${d}" OR d MATCHES "^-")
    list(APPEND LTIER_PC_LIBS_PRIVATE ${d})
  else()
    list(APPEND LTIER_PC_LIBS_PRIVATE -l${d})
  endif()
endforeach()
# libltier.a is C++: a C program linking it needs the C++ runtime too.
if(CMAKE_CXX_FLAGS MATCHES "-stdlib=libc\\+\\+")
  list(APPEND LTIER_PC_LIBS_PRIVATE -lc++ -lm)
else()
  list(APPEND LTIER_PC_LIBS_PRIVATE -lstdc++ -lm)
endif()
list(JOIN LTIER_PC_LIBS_PRIVATE " " LTIER_PC_LIBS_PRIVATE)
list(JOIN LTIER_PC_REQUIRES_PRIVATE ", " LTIER_PC_REQUIRES_PRIVATE)

configure_package_config_file(${CMAKE_CURRENT_LIST_DIR}/ltierConfig.cmake.in
                              ${CMAKE_CURRENT_BINARY_DIR}/ltierConfig.cmake
                              INSTALL_DESTINATION ${LTIER_CMAKE_DIR})
# 0.x: a minor version may change the API.
write_basic_package_version_file(${CMAKE_CURRENT_BINARY_DIR}/ltierConfigVersion.cmake
                                 VERSION ${PROJECT_VERSION} COMPATIBILITY SameMinorVersion)
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ltierConfig.cmake
              ${CMAKE_CURRENT_BINARY_DIR}/ltierConfigVersion.cmake
        DESTINATION ${LTIER_CMAKE_DIR})

# ltier.pc names the prefix given at install time (cmake --install --prefix),
# so it is written in two steps: everything else now, the prefix by install().
if(IS_ABSOLUTE "${CMAKE_INSTALL_LIBDIR}")
  set(LTIER_PC_LIBDIR ${CMAKE_INSTALL_LIBDIR})
else()
  set(LTIER_PC_LIBDIR "\${prefix}/${CMAKE_INSTALL_LIBDIR}")
endif()
if(IS_ABSOLUTE "${CMAKE_INSTALL_INCLUDEDIR}")
  set(LTIER_PC_INCLUDEDIR ${CMAKE_INSTALL_INCLUDEDIR})
else()
  set(LTIER_PC_INCLUDEDIR "\${prefix}/${CMAKE_INSTALL_INCLUDEDIR}")
endif()
set(LTIER_PC_PREFIX "@LTIER_INSTALL_PREFIX@")
configure_file(${CMAKE_CURRENT_LIST_DIR}/ltier.pc.in ${CMAKE_CURRENT_BINARY_DIR}/ltier.pc.in @ONLY)
install(CODE "set(LTIER_INSTALL_PREFIX \"\${CMAKE_INSTALL_PREFIX}\")
configure_file(\"${CMAKE_CURRENT_BINARY_DIR}/ltier.pc.in\" \"${CMAKE_CURRENT_BINARY_DIR}/ltier.pc\" @ONLY)")
install(FILES ${CMAKE_CURRENT_BINARY_DIR}/ltier.pc DESTINATION ${CMAKE_INSTALL_LIBDIR}/pkgconfig)
