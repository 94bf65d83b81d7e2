# Install rules: headers, libstreampool.{a,so}, and a CMake package so consumers can
# find_package(streampool) and link streampool::streampool (or streampool::streampool_shared).
include(GNUInstallDirs)
include(CMakePackageConfigHelpers)

install(DIRECTORY ${PROJECT_SOURCE_DIR}/include/streampool DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(TARGETS streampool streampool_shared EXPORT streampoolTargets
        ARCHIVE DESTINATION ${CMAKE_INSTALL_LIBDIR}
        LIBRARY DESTINATION ${CMAKE_INSTALL_LIBDIR}
        RUNTIME DESTINATION ${CMAKE_INSTALL_BINDIR}
        INCLUDES DESTINATION ${CMAKE_INSTALL_INCLUDEDIR})
install(EXPORT streampoolTargets NAMESPACE streampool::
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/streampool)
configure_package_config_file(${PROJECT_SOURCE_DIR}/cmake/streampoolConfig.cmake.in
  ${PROJECT_BINARY_DIR}/streampoolConfig.cmake
  INSTALL_DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/streampool)
write_basic_package_version_file(${PROJECT_BINARY_DIR}/streampoolConfigVersion.cmake
  COMPATIBILITY SameMinorVersion)
install(FILES ${PROJECT_BINARY_DIR}/streampoolConfig.cmake ${PROJECT_BINARY_DIR}/streampoolConfigVersion.cmake
        DESTINATION ${CMAKE_INSTALL_LIBDIR}/cmake/streampool)

# The build tree is a package too: find_package(streampool) with CMAKE_PREFIX_PATH=<build dir>
# finds streampoolConfig.cmake here, and it includes these targets (headers from the source tree).
export(EXPORT streampoolTargets NAMESPACE streampool:: FILE ${PROJECT_BINARY_DIR}/streampoolTargets.cmake)
