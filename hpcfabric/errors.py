"""Error types, one per layer, each carrying a message a user can act on.

Every error the command line reports derives from :class:`HpcfabricError`;
``exit_code`` is what the CLI exits with (2 for usage and configuration errors).
"""

from typing import Callable


class HpcfabricError(Exception):
    """Base of every error hpcfabric raises on purpose."""

    exit_code = 1


class ConfigError(HpcfabricError):
    """A topology or configuration file (or parameter) is invalid.

    ``source`` names the file (or "<parameters>"), ``field`` the offending key
    path (e.g. ``links[3].b``); both are folded into the message.
    """

    exit_code = 2

    def __init__(self, message: str, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        self.detail = message
        prefix = ""
        if source:
            prefix += f"{source}: "
        if field:
            prefix += f"{field}: "
        super().__init__(prefix + message)


class TopologyError(ConfigError):
    """The fabric description is impossible or inconsistent."""


class AddressingError(ConfigError):
    """The fabric does not fit the chosen address layout, or an address is malformed."""


class CompileError(HpcfabricError):
    """Rules cannot be compiled for this fabric/mode combination."""

    exit_code = 2


class VerificationError(HpcfabricError):
    """The compiled rules do not deliver every frame (raised only on request)."""

    exit_code = 1


class CoordinationError(HpcfabricError):
    """The HA coordination store (lease file, etcd) cannot be read (``hpcfabric status``)."""

    exit_code = 1


def read_user_file(path: str, expected: str, missing: "str | Callable[[], str]") -> str:
    """The UTF-8 text of a file the user named, or a :class:`ConfigError` saying why not.

    ``expected`` completes "is a directory, expected ..." and ``missing`` is the
    whole message for a file that does not exist (or makes it, e.g. with a suggestion).
    """
    try:
        with open(path, encoding="utf-8") as fh:
            return fh.read()
    except FileNotFoundError:
        raise ConfigError(missing if isinstance(missing, str) else missing(), source=path) from None
    except IsADirectoryError:
        raise ConfigError(f"is a directory, expected {expected}", source=path) from None
    except PermissionError:
        raise ConfigError("permission denied", source=path) from None
    except UnicodeDecodeError as err:
        raise ConfigError(f"not UTF-8 text (invalid byte at offset {err.start})", source=path) from None
    except OSError as err:
        raise ConfigError(f"cannot read the file: {err.strerror or err}", source=path) from None
