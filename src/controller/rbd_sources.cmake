# The Ceph RBD backend (librbd/librados, C API). Included from
# src/controller/CMakeLists.txt when present; needs librbd-dev and
# librados-dev (hack/install-deps.sh), and libcrypto for SHA-256 names.
find_package(OpenSSL REQUIRED COMPONENTS Crypto)
blockcsi_library(blockcsi_rbd_backend
  SOURCES ${CMAKE_CURRENT_SOURCE_DIR}/rbd_backend.cc
  DEPS blockcsi_attach blockcsi_common nlohmann_json::nlohmann_json OpenSSL::Crypto rbd rados)
