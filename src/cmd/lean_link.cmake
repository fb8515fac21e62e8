# How the blockcsi program is linked to keep its resident memory small
# (docs/performance.md section 6 shows where the memory goes in the last
# benchmark run; `hack/bench.sh --memory-compare LABEL=BINARY` sets a build
# without one of these steps beside this one).
#
# 1. Static gRPC, protobuf, abseil, re2, upb, c-ares and zlib archives
# instead of their shared libraries. Why: a shared library's pages count in the process's RSS as soon as they are
# touched, and the kernel maps text 64 KiB at a time around each fault. Linked
# as some 70 shared objects (libgrpc alone 4.8 MiB resident, each libabsl_*.so
# a few pages of relocations and text), gRPC cost the plugin far more RSS than
# the code it runs; linked statically only the objects the plugin uses are in
# its binary. In a pod the
# plugin is the only user of these libraries, so its RSS is what it costs.
#
# Only the blockcsi program links this way: the tests keep the shared
# libraries (a static gRPC in every test binary would make each link slow and
# large). OpenSSL too (libssl.a, libcrypto.a): nothing else in the plugin
# maps libcrypto.so at start (cpp-httplib, which does, is a module loaded on
# first use, common/lazy_http.h, with its own shared OpenSSL; no OpenSSL
# object crosses between the two). Off, or with an archive missing, the
# program links the shared libraries as before.
#
# Every archive comes from a -dev package that hack/install-deps.sh installs
# (libgrpc++-dev, libgrpc-dev, libprotobuf-dev, libabsl-dev, libre2-dev,
# libc-ares-dev, zlib1g-dev, libssl-dev); `pkg-config --static` gives their order.
option(BLOCKCSI_STATIC_GRPC "Link the blockcsi program against static gRPC/protobuf/abseil archives" ON)

function(blockcsi_find_grpc_archives out)
  set(${out} "" PARENT_SCOPE)
  pkg_check_modules(GRPC_LINK QUIET grpc++ protobuf)
  if(NOT GRPC_LINK_FOUND)
    message(STATUS "blockcsi: static gRPC off (no grpc++/protobuf pkg-config)")
    return()
  endif()
  set(archives "")
  # grpc++_reflection is not in grpc++.pc; the generated code links it.
  # ssl and crypto last: the plugin's own SHA-256 and base64 use them too.
  foreach(name grpc++_reflection ${GRPC_LINK_STATIC_LIBRARIES} ssl crypto)
    # System libraries stay shared.
    if(name MATCHES "^(dl|rt|m|atomic|pthread)$")
      continue()
    endif()
    string(MAKE_C_IDENTIFIER "BLOCKCSI_ARCHIVE_${name}" var)
    find_library(${var} NAMES lib${name}.a)
    if(NOT ${var})
      message(STATUS "blockcsi: static gRPC off (no lib${name}.a)")
      return()
    endif()
    list(APPEND archives ${${var}})
  endforeach()
  list(REMOVE_DUPLICATES archives)
  set(${out} ${archives} PARENT_SCOPE)
endfunction()

# 2. Packed relative relocations (DT_RELR, binutils >= 2.38 and glibc >= 2.36,
# Debian 12): a position-independent program's relocation table is read
# whole by the loader at every start; with gRPC inside it is some 600 KiB of
# R_X86_64_RELATIVE entries, packed it is a few KiB. ASLR stays as it is.
include(CheckLinkerFlag)
check_linker_flag(CXX "-Wl,-z,pack-relative-relocs" BLOCKCSI_LINKER_HAS_RELR)

# 3. libstdc++ and libgcc linked statically (-static-libstdc++ -static-libgcc),
# and with them the two C++-facing libraries the plugin links, yaml-cpp and
# inih, from their archives (a shared libyaml-cpp would map libstdc++.so
# anyway). Why: the plugin touches a small part of libstdc++, but the shared
# library costs ~1.7 MiB of RSS (its text around each touched page, and its
# relocated vtables and typeinfo); linked in, only the objects the plugin
# uses are there. Measured: --mode all idle RSS 13.9 -> 12.8 MiB, PSS
# unchanged (+0.1). The modules opened later (libblockcsi_http.so, librbd)
# bring their own libstdc++.so: nothing C++ crosses into them (C interfaces,
# common/http_module.h, common/ceph_lazy.h), so two copies do not meet.
include(CheckCXXSourceCompiles)
set(CMAKE_REQUIRED_LINK_OPTIONS -static-libstdc++ -static-libgcc)
check_cxx_source_compiles("#include <string>\nint main() { return std::string(\"x\").size() == 1 ? 0 : 1; }"
  BLOCKCSI_HAS_STATIC_LIBSTDCXX)
unset(CMAKE_REQUIRED_LINK_OPTIONS)
find_library(BLOCKCSI_ARCHIVE_yaml_cpp NAMES libyaml-cpp.a)
find_library(BLOCKCSI_ARCHIVE_inih NAMES libinih.a)

# In every static library under src/, the link dependencies that match
# `regex` become `replacement` (a generator expression that picks per
# program, by a property the program carries).
function(blockcsi_rewrite_library_deps regex replacement)
  foreach(dir common bridge contract attach backend controller agent node)
    get_property(targets DIRECTORY ${PROJECT_SOURCE_DIR}/src/${dir} PROPERTY BUILDSYSTEM_TARGETS)
    foreach(target ${targets})
      get_target_property(type ${target} TYPE)
      get_target_property(deps ${target} INTERFACE_LINK_LIBRARIES)
      if(NOT type STREQUAL "STATIC_LIBRARY" OR NOT deps)
        continue()
      endif()
      list(TRANSFORM deps REPLACE "${regex}" "${replacement}")
      set_property(TARGET ${target} PROPERTY INTERFACE_LINK_LIBRARIES "${deps}")
    endforeach()
  endforeach()
endfunction()

# In the libraries a program marked BLOCKCSI_STATIC_CXX links, `from` (a
# target name) becomes the archive `to`; other programs keep `from`.
function(blockcsi_swap_for_archive from to)
  set(static "$<BOOL:$<TARGET_PROPERTY:BLOCKCSI_STATIC_CXX>>")
  blockcsi_rewrite_library_deps("^${from}$" "$<IF:${static},${to},${from}>")
endfunction()

function(blockcsi_link_cxx_statically program)
  if(NOT BLOCKCSI_HAS_STATIC_LIBSTDCXX OR NOT BLOCKCSI_ARCHIVE_yaml_cpp OR NOT BLOCKCSI_ARCHIVE_inih)
    message(STATUS "blockcsi: ${program} links libstdc++ shared (no libstdc++.a, libyaml-cpp.a or libinih.a)")
    return()
  endif()
  get_property(swapped GLOBAL PROPERTY BLOCKCSI_CXX_ARCHIVES_SWAPPED)
  if(NOT swapped)
    blockcsi_swap_for_archive(yaml-cpp ${BLOCKCSI_ARCHIVE_yaml_cpp})
    blockcsi_swap_for_archive(PkgConfig::INIH ${BLOCKCSI_ARCHIVE_inih})
    set_property(GLOBAL PROPERTY BLOCKCSI_CXX_ARCHIVES_SWAPPED ON)
  endif()
  set_target_properties(${program} PROPERTIES BLOCKCSI_STATIC_CXX ON)
  target_link_options(${program} PRIVATE -static-libstdc++ -static-libgcc)
endfunction()

# 5. The code the plugin runs gathered at the start of its text. Why: the
# kernel maps program text 64 KiB around each page fault, and the 2 MiB of
# functions a volume's lifecycle executes, spread over the 11 MiB text, kept
# most of it resident. Gathered, with each function of ours in a section of
# its own (src/CMakeLists.txt), the sections that hold them fill 3.4 MiB
# (Debian's archives move whole objects). Measured on `blockcsi --mode all`,
# the same objects linked with and without the layout: idle 3 s after start
# (3 alternating runs each, binary dropped from the page cache) VmRSS 11.6-11.8
# MiB without, 9.0-9.2 MiB with, the binary's r-xp Rss 6.8-7.0 MiB without,
# 4.2-4.4 MiB with; after one volume lifecycle (memory_bench --staged 1
# --binary) VmRSS 14.3 MiB without, 11.2 MiB with, r-xp Rss 8.3 / 5.3 MiB.
# The profile is hack/profiles/hot_text.symbols (one function a line, written
# by hack/profile-text-layout.sh from a callgrind run of hack/demo.sh); the
# linker script is generated from it here, into the build tree, and the link
# says how much of the list it gathered and fails below
# BLOCKCSI_HOT_TEXT_MIN_MATCH percent: a stale list costs memory silently.
# GNU ld (and lld) take the script as an addition to their default one
# (INSERT); a linker that cannot leaves the text as it was.
option(BLOCKCSI_HOT_TEXT "Gather the plugin's executed code first (hack/profiles/hot_text.symbols)" ON)
set(BLOCKCSI_HOT_TEXT_MIN_MATCH 90 CACHE STRING "Least share (%) of the hot text profile the plugin's link must match")
set(BLOCKCSI_HOT_TEXT_SYMBOLS ${PROJECT_SOURCE_DIR}/hack/profiles/hot_text.symbols)
set(BLOCKCSI_HOT_TEXT_GENERATOR ${PROJECT_SOURCE_DIR}/hack/hot_text_script.py)
set(BLOCKCSI_HOT_TEXT_SCRIPT ${CMAKE_BINARY_DIR}/hot_text.ld)
if(BLOCKCSI_HOT_TEXT)
  find_package(Python3 COMPONENTS Interpreter)
endif()

# Links `program` the lean way: the static archives when they are all there,
# packed relocations when the linker has them.
function(blockcsi_lean_link program)
  if(BLOCKCSI_LINKER_HAS_RELR)
    target_link_options(${program} PRIVATE "-Wl,-z,pack-relative-relocs")
  endif()
  blockcsi_link_grpc_statically(${program})
  blockcsi_link_cxx_statically(${program})
endfunction()

# The executed code of `program` first (item 5): the profile is the
# plugin's, so only the plugin links with it. The script names archive
# members, so it is written from the archives this program links.
function(blockcsi_profiled_text_layout program)
  if(NOT BLOCKCSI_HOT_TEXT)
    return()
  endif()
  if(NOT Python3_Interpreter_FOUND)
    message(STATUS "blockcsi: ${program} keeps its text as linked (no python3 to write hot_text.ld)")
    return()
  endif()
  # The profile names functions of the static archives (a quarter of it):
  # linked against the shared libraries, the program could not match it.
  get_target_property(static_grpc ${program} BLOCKCSI_STATIC_GRPC)
  get_target_property(static_cxx ${program} BLOCKCSI_STATIC_CXX)
  if(NOT static_grpc OR NOT static_cxx)
    message(STATUS "blockcsi: ${program} keeps its text as linked (the profile is of the static link)")
    return()
  endif()
  get_property(archives GLOBAL PROPERTY BLOCKCSI_STATIC_GRPC_ARCHIVES)
  execute_process(COMMAND ${CMAKE_CXX_COMPILER} -print-file-name=libstdc++.a
    OUTPUT_VARIABLE libstdcxx OUTPUT_STRIP_TRAILING_WHITESPACE)
  foreach(archive ${BLOCKCSI_ARCHIVE_yaml_cpp} ${BLOCKCSI_ARCHIVE_inih} ${libstdcxx})
    if(IS_ABSOLUTE "${archive}" AND EXISTS "${archive}")
      list(APPEND archives ${archive})
    endif()
  endforeach()
  set_property(DIRECTORY APPEND PROPERTY CMAKE_CONFIGURE_DEPENDS
    ${BLOCKCSI_HOT_TEXT_SYMBOLS} ${BLOCKCSI_HOT_TEXT_GENERATOR})
  execute_process(
    COMMAND ${Python3_EXECUTABLE} ${BLOCKCSI_HOT_TEXT_GENERATOR} script --symbols ${BLOCKCSI_HOT_TEXT_SYMBOLS}
      --out ${BLOCKCSI_HOT_TEXT_SCRIPT} ${archives}
    RESULT_VARIABLE generated)
  if(NOT generated EQUAL 0)
    message(FATAL_ERROR "blockcsi: cannot write ${BLOCKCSI_HOT_TEXT_SCRIPT} from ${BLOCKCSI_HOT_TEXT_SYMBOLS}")
  endif()
  check_linker_flag(CXX "-Wl,-T,${BLOCKCSI_HOT_TEXT_SCRIPT}" BLOCKCSI_LINKER_TAKES_HOT_TEXT)
  if(NOT BLOCKCSI_LINKER_TAKES_HOT_TEXT)
    message(STATUS "blockcsi: ${program} keeps its text as linked (the linker takes no INSERT script)")
    return()
  endif()
  target_link_options(${program} PRIVATE "-Wl,-T,${BLOCKCSI_HOT_TEXT_SCRIPT}")
  set_property(TARGET ${program} APPEND PROPERTY LINK_DEPENDS ${BLOCKCSI_HOT_TEXT_SCRIPT})
  add_custom_command(TARGET ${program} POST_BUILD
    COMMAND ${Python3_EXECUTABLE} ${BLOCKCSI_HOT_TEXT_GENERATOR} check --symbols ${BLOCKCSI_HOT_TEXT_SYMBOLS}
      --min ${BLOCKCSI_HOT_TEXT_MIN_MATCH} $<TARGET_FILE:${program}>
    VERBATIM)
  set_property(GLOBAL PROPERTY BLOCKCSI_HOT_TEXT_LINKED ON)
  message(STATUS "blockcsi: ${program} links its executed code first (hot_text.ld from hot_text.symbols)")
endfunction()

# The Debian source version (dpkg's ${source:Version}) of the package that
# installed the static libgrpc.a found above, or "unknown" (an archive built
# by hand, a system without dpkg). The source version, not the binary one: a
# binNMU (+bN) rebuilds the same source, with the same registrations.
set(BLOCKCSI_GRPC_REGISTRY_WRITTEN_FOR "1.51.1-3")
function(blockcsi_grpc_archive_source_version out)
  set(${out} "unknown" PARENT_SCOPE)
  execute_process(COMMAND dpkg-query -S ${BLOCKCSI_ARCHIVE_grpc}
    OUTPUT_VARIABLE owner RESULT_VARIABLE owner_rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(NOT owner_rc EQUAL 0 OR NOT owner MATCHES "^([^:, ]+)")
    return()
  endif()
  execute_process(COMMAND dpkg-query -W [=[-f=${source:Version}]=] ${CMAKE_MATCH_1}
    OUTPUT_VARIABLE version RESULT_VARIABLE version_rc OUTPUT_STRIP_TRAILING_WHITESPACE ERROR_QUIET)
  if(version_rc EQUAL 0 AND version)
    set(${out} "${version}" PARENT_SCOPE)
  endif()
endfunction()

# Marks `program` to link the static archives when they are all there.
function(blockcsi_link_grpc_statically program)
  if(NOT BLOCKCSI_STATIC_GRPC)
    return()
  endif()
  if(NOT TARGET blockcsi_grpc_static)
    blockcsi_find_grpc_archives(archives)
    if(NOT archives)
      return()
    endif()
    find_package(OpenSSL REQUIRED)
    set_property(GLOBAL PROPERTY BLOCKCSI_STATIC_GRPC_ARCHIVES "${archives}")
    list(JOIN archives "," group)
    add_library(blockcsi_grpc_static INTERFACE)
    # One group: the archives refer to each other in every direction.
    target_link_libraries(blockcsi_grpc_static INTERFACE
      "$<LINK_GROUP:RESCAN,${group}>" Threads::Threads ${CMAKE_DL_LIBS} rt m atomic)
    # blockcsi_proto carries gRPC to every program and test; a program marked
    # BLOCKCSI_STATIC_GRPC gets the archives in place of the shared libraries.
    set(static "$<BOOL:$<TARGET_PROPERTY:BLOCKCSI_STATIC_GRPC>>")
    set_property(TARGET blockcsi_proto PROPERTY INTERFACE_LINK_LIBRARIES
      "$<${static}:blockcsi_grpc_static>"
      "$<$<NOT:${static}>:protobuf::libprotobuf>"
      "$<$<NOT:${static}>:gRPC::grpc++>"
      "$<$<NOT:${static}>:gRPC::grpc++_reflection>")
    # Our libraries that use OpenSSL themselves (SHA-256 of RBD image names,
    # base64 of a kubeconfig's CA) take it from the group in such a program:
    # one OpenSSL, the static one, and libcrypto.so never mapped.
    blockcsi_rewrite_library_deps("^(OpenSSL::SSL|OpenSSL::Crypto)$" "$<$<NOT:${static}>:\\1>")
  endif()
  set_target_properties(${program} PROPERTIES BLOCKCSI_STATIC_GRPC ON)
  message(STATUS "blockcsi: ${program} links gRPC, protobuf and abseil statically")
  # 4. gRPC's core configuration cut to what the plugin uses (no xDS, RLS,
  # grpclb...; grpc_core_configuration.cc says what and why). Its list of
  # gRPC's internal registration functions was read from one source release
  # of gRPC, Debian 12's grpc 1.51.1-3: with any other (a Debian patch
  # release may add or drop a registration) the program keeps gRPC's own.
  blockcsi_grpc_archive_source_version(grpc_source_version)
  if(grpc_source_version STREQUAL BLOCKCSI_GRPC_REGISTRY_WRITTEN_FOR)
    target_sources(${program} PRIVATE ${CMAKE_CURRENT_FUNCTION_LIST_DIR}/grpc_core_configuration.cc)
    set_property(GLOBAL PROPERTY BLOCKCSI_GRPC_REGISTRY_CUT ON)
    message(STATUS "blockcsi: ${program} registers only the gRPC components it uses (grpc ${grpc_source_version})")
  else()
    message(STATUS "blockcsi: ${program} keeps gRPC's own registry: grpc_core_configuration.cc was written for "
                   "grpc ${BLOCKCSI_GRPC_REGISTRY_WRITTEN_FOR}, the archive is from ${grpc_source_version}")
  endif()
endfunction()
