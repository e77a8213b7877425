"""The one exception type for mistakes a user can fix.

Entry points print a `UserError` as one line and exit non-zero, with no traceback;
any other exception is a bug and keeps its traceback.
"""


class UserError(ValueError):
  """Bad input: the message names what is wrong and what would work."""
