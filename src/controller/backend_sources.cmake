# The target backend (backend owner): pool, tgt and LIO exporters, the local
# backend with its reconcile loop, the agent's gRPC service and the remote
# client, and MakeBackend. Plus the storage-host agent, blockcsi-target.
blockcsi_library(blockcsi_backend
  SOURCES
    ${CMAKE_CURRENT_SOURCE_DIR}/volume_id.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/pool.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/tgtadm_parser.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/tgt_exporter.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/tgtd_socket.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/lio_exporter.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/local_backend.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/target_proto.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/agent_service.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/remote_backend.cc
    ${CMAKE_CURRENT_SOURCE_DIR}/backend_factory.cc
  DEPS blockcsi_attach blockcsi_common PkgConfig::LIBISCSI Threads::Threads)

blockcsi_program(blockcsi-target
  SOURCES ${PROJECT_SOURCE_DIR}/src/cmd/blockcsi_target_main.cc
  DEPS blockcsi_backend blockcsi_server CLI11::CLI11)

# MakeBackend also builds the RBD backend when its library is part of the build.
if(TARGET blockcsi_rbd_backend)
  target_link_libraries(blockcsi_backend PUBLIC blockcsi_rbd_backend)
  target_compile_definitions(blockcsi_backend PRIVATE BLOCKCSI_WITH_RBD=1)
endif()
