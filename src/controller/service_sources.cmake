# The CSI controller service (controller service owner), on top of the
# VolumeBackend interface; blockcsi_backend provides MakeBackend.
blockcsi_library(blockcsi_controller
  SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/controller_service.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/capabilities.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/parameters.cc
  DEPS blockcsi_backend blockcsi_attach blockcsi_common)
