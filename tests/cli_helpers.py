"""Shared checks for tests that run the command-line entry points."""


def assert_one_line_error(test, proc, pattern):
  """The process failed with exactly one `error: ...` line matching pattern."""
  test.assertNotEqual(proc.returncode, 0)
  test.assertNotIn("Traceback", proc.stderr)
  errors = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
  test.assertLen(errors, 1, proc.stderr[-3000:])
  test.assertRegex(errors[0], pattern)
  return errors[0]
