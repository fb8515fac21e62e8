# Parsers of the controller, attach and node layers (see parser_fuzzers.cc).
# Only the libraries whose code they parse with: no node library (nothing
# here is the node's own), so the fuzz tree does not build it.
set(_parser_deps blockcsi_controller blockcsi_backend blockcsi_attach blockcsi_common)
foreach(name tgtadm attach_spec iscsi_names vpd attach_record volume_id storage_class mount_options sysfs)
  string(TOUPPER ${name} upper)
  blockcsi_fuzz_target(${name} parser_fuzzers.cc FUZZ_TARGET_${upper} "${_parser_deps}")
endforeach()
