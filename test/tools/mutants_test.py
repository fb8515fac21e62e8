#!/usr/bin/env python3
"""The mutant rules (test/tools/mutants.py) on a made-up source and on src/:
each category finds its sites, a mutant changes only its span, ids are unique."""
import os
import sys
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import mutants  # noqa: E402

SAMPLE = r'''
Status Save(const std::string& path, const std::string& data, const Host& host) {
  std::string temp = path + ".tmp";  // ::unlink(in a comment) is no call
  int fd = ::open(temp.c_str(), O_WRONLY | O_CREAT | O_EXCL, 0600);
  if (::fsync(fd) != 0) return ErrnoToStatus(errno, "fsync");
  ::close(fd);
  if (::rename(temp.c_str(), path.c_str()) != 0) return ErrnoToStatus(errno, "rename");
  LogDebug("saved", {{"argv", command.Redacted()}, {"text", "::kill(1, 9)"}});
  BLOCKCSI_RETURN_IF_ERROR(host_->MakeDirectory(path + "/d", 0700));
  return WriteFileAtomically(path, Command("x").Secret(data).Redacted());
}
'''


class RulesTest(unittest.TestCase):
    def test_each_rule_finds_its_site_and_nothing_in_comments_or_strings(self):
        found = {(m.category, m.rule) for m in mutants.mutants_in("src/x.cc", SAMPLE)}
        self.assertEqual(found, {
            ("record-write", "skip ::fsync"), ("record-write", "fail ::fsync"),
            ("record-write", "skip ::rename"), ("record-write", "fail ::rename"),
            ("record-write", "write in place"), ("record-write", "skip WriteFileAtomically"),
            ("os-effect", "skip host MakeDirectory"), ("os-effect", "fail host MakeDirectory"),
            ("redaction", "argv unredacted"), ("redaction", "Secret as Arg"),
        })

    def test_a_mutant_changes_only_its_span_and_keeps_arguments_evaluated(self):
        for m in mutants.mutants_in("src/x.cc", SAMPLE):
            out = m.apply(SAMPLE)
            self.assertEqual(out[:m.start], SAMPLE[:m.start])
            self.assertEqual(out[m.start + len(m.replacement):], SAMPLE[m.end:])
            if m.rule == "skip ::fsync":
                self.assertIn("if ([&]() -> int { (void)(fd); return 0; }() != 0)", out)
            if m.rule == "write in place":
                self.assertIn("::open(path.c_str(), O_WRONLY | O_CREAT | O_TRUNC, 0600)", out)
                self.assertIn('std::string temp = path + ".tmp";', out)
                self.assertNotIn("::rename(", out)

    def test_src_has_every_category_and_unique_ids(self):
        root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
        all_mutants = mutants.all_mutants(root)
        ids = [m.id for m in all_mutants]
        self.assertEqual(len(ids), len(set(ids)))
        by_file = {(m.path, m.rule) for m in all_mutants}
        # The fsync under the atomic write's own helper, not only the helper's call.
        self.assertIn(("src/common/atomic_file.cc", "skip ::fsync"), by_file)
        self.assertIn(("src/common/atomic_file.cc", "write in place"), by_file)
        self.assertIn(("src/common/rpc_logging.cc", "json unredacted"), by_file)
        self.assertIn(("src/backend/local/tgtadm_control.cc", "Secret as Arg"), by_file)
        for category in ("record-write", "redaction", "os-effect"):
            self.assertTrue(any(m.category == category for m in all_mutants), category)


if __name__ == "__main__":
    unittest.main()
