"""Stand-in for the `expecttest` package, which Debian 12 does not ship.

torch.testing._internal.common_utils imports it for its TestCase base and
its ACCEPT flag (inline expected-output tests). torch's distributed tests use
neither, so a plain unittest.TestCase and ACCEPT = False are enough.
"""
import unittest

ACCEPT = False


class TestCase(unittest.TestCase):
    def assertExpectedInline(self, *args, **kwargs):  # noqa: N802
        raise unittest.SkipTest("expecttest is not installed")
