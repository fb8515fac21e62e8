// librbd and librados, loaded on first use instead of at program start.
// Linked normally, the Ceph libraries (librbd, librados, libceph-common and
// what they pull in: boost, cryptsetup, ibverbs...) cost every blockcsi
// process ~12 MiB of RSS and their static initialisers' time, although most
// deployments configure no RBD backend. Code that calls Ceph
// includes this header after (or instead of) <rbd/librbd.h>: each C function
// it uses becomes a call through a pointer resolved once from the library
// loaded with dlopen. Where a Ceph component starts (the RBD backend, the
// bridge's RBD transport) it calls LoadCephLibraries() first and turns a
// missing library into a status; a call made without that check aborts with
// the library's error. Thread-safe.
#pragma once

#include <rados/librados.h>
#include <rbd/librbd.h>

#include "common/status.h"

namespace blockcsi {

// OK once librbd.so.1 (and with it librados.so.2) is loaded; FAILED_PRECONDITION
// naming the library and dlerror() otherwise. Loads at most once.
Status LoadCephLibraries();

// The address of the named librbd/librados function; aborts when the
// libraries cannot be loaded or lack it (a build against other headers).
void* CephSymbol(const char* name);

template <typename Function>
Function* CephFunction(const char* name) {
  return reinterpret_cast<Function*>(CephSymbol(name));
}

}  // namespace blockcsi

// The pointer is resolved once per call site (a function-local static).
// decltype(::fn) names the header's declaration without referencing the
// symbol, so nothing links against the library.
#define BLOCKCSI_CEPH_FUNCTION(fn)                                         \
  ([] {                                                                    \
    static auto* resolved = ::blockcsi::CephFunction<decltype(::fn)>(#fn); \
    return resolved;                                                       \
  }())

// clang-format off
#define rados_blocklist_add(...) BLOCKCSI_CEPH_FUNCTION(rados_blocklist_add)(__VA_ARGS__)
#define rados_buffer_free(...) BLOCKCSI_CEPH_FUNCTION(rados_buffer_free)(__VA_ARGS__)
#define rados_conf_get(...) BLOCKCSI_CEPH_FUNCTION(rados_conf_get)(__VA_ARGS__)
#define rados_conf_read_file(...) BLOCKCSI_CEPH_FUNCTION(rados_conf_read_file)(__VA_ARGS__)
#define rados_conf_set(...) BLOCKCSI_CEPH_FUNCTION(rados_conf_set)(__VA_ARGS__)
#define rados_connect(...) BLOCKCSI_CEPH_FUNCTION(rados_connect)(__VA_ARGS__)
#define rados_create2(...) BLOCKCSI_CEPH_FUNCTION(rados_create2)(__VA_ARGS__)
#define rados_get_instance_id(...) BLOCKCSI_CEPH_FUNCTION(rados_get_instance_id)(__VA_ARGS__)
#define rados_getaddrs(...) BLOCKCSI_CEPH_FUNCTION(rados_getaddrs)(__VA_ARGS__)
#define rados_ioctx_create(...) BLOCKCSI_CEPH_FUNCTION(rados_ioctx_create)(__VA_ARGS__)
#define rados_ioctx_create2(...) BLOCKCSI_CEPH_FUNCTION(rados_ioctx_create2)(__VA_ARGS__)
#define rados_ioctx_destroy(...) BLOCKCSI_CEPH_FUNCTION(rados_ioctx_destroy)(__VA_ARGS__)
#define rados_mon_command(...) BLOCKCSI_CEPH_FUNCTION(rados_mon_command)(__VA_ARGS__)
#define rados_shutdown(...) BLOCKCSI_CEPH_FUNCTION(rados_shutdown)(__VA_ARGS__)
#define rados_stat(...) BLOCKCSI_CEPH_FUNCTION(rados_stat)(__VA_ARGS__)
#define rbd_break_lock(...) BLOCKCSI_CEPH_FUNCTION(rbd_break_lock)(__VA_ARGS__)
#define rbd_clone3(...) BLOCKCSI_CEPH_FUNCTION(rbd_clone3)(__VA_ARGS__)
#define rbd_close(...) BLOCKCSI_CEPH_FUNCTION(rbd_close)(__VA_ARGS__)
#define rbd_create4(...) BLOCKCSI_CEPH_FUNCTION(rbd_create4)(__VA_ARGS__)
#define rbd_flatten(...) BLOCKCSI_CEPH_FUNCTION(rbd_flatten)(__VA_ARGS__)
#define rbd_aio_create_completion(...) BLOCKCSI_CEPH_FUNCTION(rbd_aio_create_completion)(__VA_ARGS__)
#define rbd_aio_flush(...) BLOCKCSI_CEPH_FUNCTION(rbd_aio_flush)(__VA_ARGS__)
#define rbd_aio_get_return_value(...) BLOCKCSI_CEPH_FUNCTION(rbd_aio_get_return_value)(__VA_ARGS__)
#define rbd_aio_read2(...) BLOCKCSI_CEPH_FUNCTION(rbd_aio_read2)(__VA_ARGS__)
#define rbd_aio_release(...) BLOCKCSI_CEPH_FUNCTION(rbd_aio_release)(__VA_ARGS__)
#define rbd_aio_write2(...) BLOCKCSI_CEPH_FUNCTION(rbd_aio_write2)(__VA_ARGS__)
#define rbd_aio_write_zeroes(...) BLOCKCSI_CEPH_FUNCTION(rbd_aio_write_zeroes)(__VA_ARGS__)
#define rbd_flush(...) BLOCKCSI_CEPH_FUNCTION(rbd_flush)(__VA_ARGS__)
#define rbd_get_create_timestamp(...) BLOCKCSI_CEPH_FUNCTION(rbd_get_create_timestamp)(__VA_ARGS__)
#define rbd_get_id(...) BLOCKCSI_CEPH_FUNCTION(rbd_get_id)(__VA_ARGS__)
#define rbd_get_parent(...) BLOCKCSI_CEPH_FUNCTION(rbd_get_parent)(__VA_ARGS__)
#define rbd_get_size(...) BLOCKCSI_CEPH_FUNCTION(rbd_get_size)(__VA_ARGS__)
#define rbd_image_options_create(...) BLOCKCSI_CEPH_FUNCTION(rbd_image_options_create)(__VA_ARGS__)
#define rbd_image_options_destroy(...) BLOCKCSI_CEPH_FUNCTION(rbd_image_options_destroy)(__VA_ARGS__)
#define rbd_image_options_set_uint64(...) BLOCKCSI_CEPH_FUNCTION(rbd_image_options_set_uint64)(__VA_ARGS__)
#define rbd_image_spec_list_cleanup(...) BLOCKCSI_CEPH_FUNCTION(rbd_image_spec_list_cleanup)(__VA_ARGS__)
#define rbd_linked_image_spec_cleanup(...) BLOCKCSI_CEPH_FUNCTION(rbd_linked_image_spec_cleanup)(__VA_ARGS__)
#define rbd_linked_image_spec_list_cleanup(...) BLOCKCSI_CEPH_FUNCTION(rbd_linked_image_spec_list_cleanup)(__VA_ARGS__)
#define rbd_list2(...) BLOCKCSI_CEPH_FUNCTION(rbd_list2)(__VA_ARGS__)
#define rbd_list_children3(...) BLOCKCSI_CEPH_FUNCTION(rbd_list_children3)(__VA_ARGS__)
#define rbd_list_lockers(...) BLOCKCSI_CEPH_FUNCTION(rbd_list_lockers)(__VA_ARGS__)
#define rbd_lock_acquire(...) BLOCKCSI_CEPH_FUNCTION(rbd_lock_acquire)(__VA_ARGS__)
#define rbd_lock_get_owners(...) BLOCKCSI_CEPH_FUNCTION(rbd_lock_get_owners)(__VA_ARGS__)
#define rbd_lock_get_owners_cleanup(...) BLOCKCSI_CEPH_FUNCTION(rbd_lock_get_owners_cleanup)(__VA_ARGS__)
#define rbd_metadata_list(...) BLOCKCSI_CEPH_FUNCTION(rbd_metadata_list)(__VA_ARGS__)
#define rbd_metadata_remove(...) BLOCKCSI_CEPH_FUNCTION(rbd_metadata_remove)(__VA_ARGS__)
#define rbd_metadata_set(...) BLOCKCSI_CEPH_FUNCTION(rbd_metadata_set)(__VA_ARGS__)
#define rbd_open(...) BLOCKCSI_CEPH_FUNCTION(rbd_open)(__VA_ARGS__)
#define rbd_open_read_only(...) BLOCKCSI_CEPH_FUNCTION(rbd_open_read_only)(__VA_ARGS__)
#define rbd_pool_metadata_get(...) BLOCKCSI_CEPH_FUNCTION(rbd_pool_metadata_get)(__VA_ARGS__)
#define rbd_pool_metadata_list(...) BLOCKCSI_CEPH_FUNCTION(rbd_pool_metadata_list)(__VA_ARGS__)
#define rbd_pool_metadata_remove(...) BLOCKCSI_CEPH_FUNCTION(rbd_pool_metadata_remove)(__VA_ARGS__)
#define rbd_pool_metadata_set(...) BLOCKCSI_CEPH_FUNCTION(rbd_pool_metadata_set)(__VA_ARGS__)
#define rbd_read2(...) BLOCKCSI_CEPH_FUNCTION(rbd_read2)(__VA_ARGS__)
#define rbd_remove(...) BLOCKCSI_CEPH_FUNCTION(rbd_remove)(__VA_ARGS__)
#define rbd_resize(...) BLOCKCSI_CEPH_FUNCTION(rbd_resize)(__VA_ARGS__)
#define rbd_snap_create(...) BLOCKCSI_CEPH_FUNCTION(rbd_snap_create)(__VA_ARGS__)
#define rbd_snap_exists(...) BLOCKCSI_CEPH_FUNCTION(rbd_snap_exists)(__VA_ARGS__)
#define rbd_snap_get_timestamp(...) BLOCKCSI_CEPH_FUNCTION(rbd_snap_get_timestamp)(__VA_ARGS__)
#define rbd_snap_list(...) BLOCKCSI_CEPH_FUNCTION(rbd_snap_list)(__VA_ARGS__)
#define rbd_snap_list_end(...) BLOCKCSI_CEPH_FUNCTION(rbd_snap_list_end)(__VA_ARGS__)
#define rbd_snap_protect(...) BLOCKCSI_CEPH_FUNCTION(rbd_snap_protect)(__VA_ARGS__)
#define rbd_snap_remove(...) BLOCKCSI_CEPH_FUNCTION(rbd_snap_remove)(__VA_ARGS__)
#define rbd_snap_spec_cleanup(...) BLOCKCSI_CEPH_FUNCTION(rbd_snap_spec_cleanup)(__VA_ARGS__)
#define rbd_snap_unprotect(...) BLOCKCSI_CEPH_FUNCTION(rbd_snap_unprotect)(__VA_ARGS__)
#define rbd_watchers_list(...) BLOCKCSI_CEPH_FUNCTION(rbd_watchers_list)(__VA_ARGS__)
#define rbd_watchers_list_cleanup(...) BLOCKCSI_CEPH_FUNCTION(rbd_watchers_list_cleanup)(__VA_ARGS__)
#define rbd_write2(...) BLOCKCSI_CEPH_FUNCTION(rbd_write2)(__VA_ARGS__)
// clang-format on
