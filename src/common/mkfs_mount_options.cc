#include "common/mkfs_mount_options.h"

#include <algorithm>
#include <array>
#include <cctype>
#include <map>
#include <set>

namespace blockcsi {
namespace {

// Mount options that only tune behaviour. Left out on purpose: dev, suid,
// exec (undo the kubelet's hardening), bind/rbind/move/remount (change what
// is mounted), nobarrier (data loss on power failure), errors=panic (one bad
// volume takes the node down).
const std::set<std::string, std::less<>> kCommonFlags = {
    "ro",         "rw",        "noatime",  "relatime", "strictatime", "nodiratime", "lazytime",
    "nolazytime", "nodev",     "nosuid",   "noexec",   "sync",        "async",      "dirsync",
    "discard",    "nodiscard", "usrquota", "grpquota", "prjquota",    "quota",      "noquota",
    "uquota",     "gquota",    "pquota",   "acl",      "noacl",       "user_xattr", "nouser_xattr"};
const std::map<std::string, std::set<std::string, std::less<>>, std::less<>> kFsFlags = {
    {"ext4",
     {"data=ordered", "data=journal", "data=writeback", "errors=remount-ro", "errors=continue", "barrier", "barrier=1",
      "journal_checksum", "journal_async_commit", "delalloc", "nodelalloc", "auto_da_alloc", "noauto_da_alloc",
      "dioread_nolock", "dioread_lock", "init_itable", "noinit_itable", "block_validity", "noblock_validity"}},
    {"xfs", {"nouuid", "inode64", "inode32", "largeio", "nolargeio", "wsync", "attr2", "noattr2", "grpid", "nogrpid"}},
    {"btrfs",
     {"ssd", "nossd", "ssd_spread", "nossd_spread", "autodefrag", "noautodefrag", "space_cache=v2", "datacow",
      "nodatacow", "datasum", "nodatasum", "compress", "compress-force", "flushoncommit", "noflushoncommit",
      "degraded"}},
};
// Options of the form key=<number or short token>.
const std::map<std::string, std::set<std::string, std::less<>>, std::less<>> kFsValueFlags = {
    {"ext4", {"commit", "stripe", "inode_readahead_blks", "max_batch_time", "min_batch_time", "journal_ioprio"}},
    {"xfs", {"logbufs", "logbsize", "allocsize", "sunit", "swidth", "swalloc"}},
    {"btrfs", {"commit", "compress", "compress-force", "max_inline", "thread_pool"}},
};

bool IsValueToken(std::string_view v, size_t max_len = 32) {
  if (v.empty() || v.size() > max_len) return false;
  return std::all_of(v.begin(), v.end(), [](unsigned char c) {
    return std::isalnum(c) || c == '_' || c == '.' || c == ':' || c == '-' || c == '+' || c == '^' || c == ',' ||
           c == '=';
  });
}

// How an mkfs option's value is read. Most values are one short token (a
// size, a label, a feature list). Some of mkfs.xfs's and mke2fs's options take
// a comma-separated list of sub-options instead, and among those sub-options
// some name a file or device that mkfs then opens and writes (mkfs.xfs -d
// file=/name=, -l logdev=, -r rtdev=): those lists are read key by key
// against an allow-list, so that no spelling of a value can name a path.
struct MkfsValue {
  // Empty: the value is a single token. Otherwise: the sub-option keys
  // allowed in the value's comma-separated "key[=token]" list.
  std::set<std::string, std::less<>> sub_options;
};

struct MkfsRule {
  // Options that take a value in the next argument.
  std::map<std::string, MkfsValue, std::less<>> with_value;
  // Options that stand alone.
  std::set<std::string, std::less<>> alone;
};

const MkfsValue kToken{};

// Force flags (-f, -F) and every option or sub-option that names a file or
// device (-d file=/name=, -l logdev=, -r rtdev=, -p protofile, -r rootdir,
// -J device=, -d rootdir, -l badblocks file, -z undo file) are absent on
// purpose: mkfs would write into, or read from, whatever they name.
const std::map<std::string, MkfsRule, std::less<>> kMkfsRules = {
    {"ext4",
     {{{"-b", kToken},
       {"-C", kToken},
       {"-i", kToken},
       {"-I", kToken},
       {"-m", kToken},
       {"-N", kToken},
       {"-L", kToken},
       {"-O", kToken},
       {"-E",
        {{"stride", "stripe_width", "stripe-width", "resize", "lazy_itable_init", "lazy_journal_init",
          "packed_meta_blocks", "root_owner", "test_fs", "discard", "nodiscard", "quotatype", "num_backup_sb",
          "mmp_update_interval", "encoding", "encoding_flags", "orphan_file_size", "assume_storage_prezeroed"}}},
       {"-T", kToken},
       {"-g", kToken},
       {"-G", kToken},
       {"-e", kToken},
       {"-U", kToken}},
      {"-j", "-q"}}},
    {"xfs",
     {{{"-b", {{"size", "log"}}},
       {"-m", {{"crc", "finobt", "uuid", "rmapbt", "reflink", "bigtime", "inobtcount"}}},
       {"-i", {{"size", "log", "perblock", "maxpct", "align", "attr", "projid32bit", "sparse", "nrext64"}}},
       {"-L", kToken},
       {"-n", {{"size", "log", "version", "ftype"}}},
       {"-d",
        {{"agcount", "agsize", "cowextsize", "noalign", "size", "sunit", "su", "swidth", "sw", "extszinherit",
          "daxinherit", "projinherit"}}},
       {"-l", {{"internal", "size", "version", "sunit", "su", "lazy-count"}}},
       {"-s", {{"size", "log"}}},
       {"-r", {{"extsize", "size", "noalign"}}}},
      {"-q", "-K"}}},
    {"btrfs",
     {{{"-L", kToken},
       {"-n", kToken},
       {"-s", kToken},
       {"-m", kToken},
       {"-d", kToken},
       {"-O", kToken},
       {"-R", kToken},
       {"--csum", kToken},
       {"-U", kToken}},
      {"-q", "-K", "--nodiscard"}}},
};

// Why `value` may not follow an option read as `how`; "" when it may.
std::string RefusedValue(const MkfsValue& how, std::string_view value) {
  // Values are short tokens: no paths (no '/'), nothing a program could read
  // as another option.
  if (!IsValueToken(value, 128) || value.front() == '-') return "is not allowed";
  if (how.sub_options.empty()) return "";
  std::string_view rest = value;
  for (bool more = true; more;) {
    const size_t comma = rest.find(',');
    const std::string_view item = rest.substr(0, comma);
    more = comma != std::string_view::npos;
    if (more) rest.remove_prefix(comma + 1);
    const size_t eq = item.find('=');
    const std::string_view key = item.substr(0, eq);
    if (!how.sub_options.contains(key)) return "has sub-option \"" + std::string(key) + "\", which is not allowed";
    if (eq != std::string_view::npos) {
      const std::string_view sub_value = item.substr(eq + 1);
      if (sub_value.empty() || sub_value.find('=') != std::string_view::npos) {
        return "has a malformed sub-option \"" + std::string(item) + "\"";
      }
    }
  }
  return "";
}

}  // namespace

bool IsStageableFsType(std::string_view fs_type) { return fs_type == "ext4" || fs_type == "xfs" || fs_type == "btrfs"; }

Status ValidateMountFlags(std::string_view volume_id, std::string_view fs_type, const std::vector<std::string>& flags) {
  for (const auto& flag : flags) {
    // A flag may itself be a comma separated list ("noatime,nodiratime").
    if (fs_type.empty()) {
      // A raw block volume is never mounted: a flag would be silently ignored.
      return InvalidArgument("volume " + std::string(volume_id) + ": mount flag \"" + flag +
                             "\" given for a raw block volume");
    }
    std::string_view rest = flag;
    for (bool more = true; more;) {
      size_t comma = rest.find(',');
      std::string_view one = rest.substr(0, comma);
      more = comma != std::string_view::npos;
      if (more) rest.remove_prefix(comma + 1);
      if (one.empty())
        return InvalidArgument("volume " + std::string(volume_id) + ": empty mount flag in \"" + flag + "\"");
      bool allowed = kCommonFlags.contains(one);
      if (!allowed) {
        auto fs = kFsFlags.find(fs_type);
        allowed = fs != kFsFlags.end() && fs->second.contains(one);
      }
      if (!allowed) {
        size_t eq = one.find('=');
        auto vf = kFsValueFlags.find(fs_type);
        allowed = eq != std::string_view::npos && vf != kFsValueFlags.end() && vf->second.contains(one.substr(0, eq)) &&
                  IsValueToken(one.substr(eq + 1)) && one.substr(eq + 1).find_first_of(",=") == std::string_view::npos;
      }
      if (!allowed) {
        return InvalidArgument("volume " + std::string(volume_id) + ": mount flag \"" + std::string(one) +
                               "\" is not allowed for " + std::string(fs_type));
      }
    }
  }
  return OkStatus();
}

StatusOr<std::vector<std::string>> ParseMkfsOptions(std::string_view volume_id, std::string_view fs_type,
                                                    std::string_view text) {
  auto rule = kMkfsRules.find(fs_type);
  if (rule == kMkfsRules.end()) {
    return InvalidArgument("volume " + std::string(volume_id) + ": no mkfs options for filesystem \"" +
                           std::string(fs_type) + "\"");
  }
  std::vector<std::string> tokens;
  std::string current;
  for (char c : text) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!current.empty()) tokens.push_back(std::move(current));
      current.clear();
    } else {
      current += c;
    }
  }
  if (!current.empty()) tokens.push_back(std::move(current));
  auto bad = [&](const std::string& what) {
    return InvalidArgument("volume " + std::string(volume_id) + ": mkfsOptions for " + std::string(fs_type) + ": " +
                           what);
  };
  std::vector<std::string> out;
  for (size_t i = 0; i < tokens.size(); ++i) {
    const std::string& t = tokens[i];
    if (rule->second.alone.contains(t)) {
      out.push_back(t);
    } else if (auto how = rule->second.with_value.find(t); how != rule->second.with_value.end()) {
      if (i + 1 >= tokens.size()) return bad("option " + t + " needs a value");
      const std::string& v = tokens[++i];
      if (std::string why = RefusedValue(how->second, v); !why.empty()) {
        return bad("value \"" + v + "\" of " + t + " " + why);
      }
      out.push_back(t);
      out.push_back(v);
    } else {
      return bad("option \"" + t + "\" is not allowed");
    }
  }
  return out;
}

std::vector<std::string> MkfsArgv(std::string_view fs_type, const std::string& device,
                                  const std::vector<std::string>& extra) {
  std::vector<std::string> argv;
  if (fs_type == "ext4") {
    // mke2fs keeps only the last -E: merge the caller's into ours.
    std::string ext = "nodiscard,lazy_itable_init=1,lazy_journal_init=1";
    std::vector<std::string> rest;
    for (size_t i = 0; i < extra.size(); ++i) {
      if (extra[i] == "-E" && i + 1 < extra.size()) {
        ext += "," + extra[++i];
      } else {
        rest.push_back(extra[i]);
      }
    }
    argv = {"mkfs.ext4", "-q", "-E", ext};
    argv.insert(argv.end(), rest.begin(), rest.end());
  } else if (fs_type == "xfs") {
    argv = {"mkfs.xfs", "-q", "-K"};
    argv.insert(argv.end(), extra.begin(), extra.end());
  } else {
    argv = {"mkfs.btrfs", "-q", "--nodiscard"};
    argv.insert(argv.end(), extra.begin(), extra.end());
  }
  argv.push_back(device);
  return argv;
}

}  // namespace blockcsi
