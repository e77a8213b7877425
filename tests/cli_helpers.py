"""Shared checks for user errors: in-process, and from the command-line entry points.

A command turns a `UserError` into one `error: ...` line and exit status 2
(`launch.cli.run`). Most tests check the message in-process with
`assert_user_error`; a few end-to-end tests (marked slow) run the command and
check the whole contract with `assert_one_line_error`.
"""

from ut.errors import UserError


def assert_one_line_error(test, proc, pattern):
  """The process failed with exactly one `error: ...` line matching pattern."""
  test.assertNotEqual(proc.returncode, 0)
  test.assertNotIn("Traceback", proc.stderr)
  errors = [l for l in proc.stderr.splitlines() if l.startswith("error: ")]
  test.assertLen(errors, 1, proc.stderr[-3000:])
  test.assertRegex(errors[0], pattern)
  return errors[0]


def assert_user_error(test, pattern, fn, *args, **kwargs):
  """fn(*args, **kwargs) raises a UserError whose message matches pattern and
  fits on the one `error: ...` line a command prints."""
  with test.assertRaisesRegex(UserError, pattern) as raised:
    fn(*args, **kwargs)
  message = str(raised.exception)
  test.assertNotIn("\n", message)
  return message
