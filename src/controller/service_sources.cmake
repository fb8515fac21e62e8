# The CSI controller service (controller service owner), on top of the
# VolumeBackend interface; blockcsi_backend provides MakeBackend.
blockcsi_library(blockcsi_controller
  SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/controller_service.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/capabilities.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/parameters.cc
  DEPS blockcsi_backend blockcsi_attach blockcsi_common)
# Several backends behind one controller (--backend-config) and cephx
# credentials from CSI secrets: routing_backend.h, backend_config.h,
# call_scope.h, rbd_secret_backend.h.
target_sources(blockcsi_controller PRIVATE
  ${CMAKE_CURRENT_SOURCE_DIR}/call_scope.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/call_scoping_controller.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/routing_backend.cc
  ${CMAKE_CURRENT_SOURCE_DIR}/backend_config.cc)
if(TARGET blockcsi_rbd_backend)
  target_sources(blockcsi_controller PRIVATE ${CMAKE_CURRENT_SOURCE_DIR}/rbd_secret_backend.cc)
  target_compile_definitions(blockcsi_controller PRIVATE BLOCKCSI_WITH_RBD=1)
endif()
