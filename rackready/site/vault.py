"""Vault: Ansible's vault passwords found as ansible-playbook finds them, loaders that
tolerate what they cannot open, and host variables whose vaulted values fail only when used."""

from __future__ import annotations

from pathlib import Path
from typing import Any, cast

import yaml

from rackready.errors import UserError
from rackready.site.paths import inventory_path

VAULT_HINT = ("set ANSIBLE_VAULT_PASSWORD_FILE or ANSIBLE_VAULT_IDENTITY_LIST, or "
              "vault_password_file in ansible.cfg")


def vault_env(inventory: str | Path) -> dict[str, str]:
    """Environment for Ansible commands on this inventory: the vault password file the
    inventory names (rackready_vault_password_file, as the lab's does) when none is
    configured."""
    # Ansible on first use: a heavy import, kept out of every command's startup
    from ansible import constants

    cfg = constants.config
    if cfg.get_config_value("DEFAULT_VAULT_PASSWORD_FILE") or \
            cfg.get_config_value("DEFAULT_VAULT_IDENTITY_LIST"):
        return {}
    try:
        path = Path(inventory_path(str(inventory))).resolve()
    except UserError:
        return {}
    pw = named_password_file(path)
    return {"ANSIBLE_VAULT_PASSWORD_FILE": str(pw)} if pw and pw.exists() else {}


def named_password_file(hosts: Path) -> Path | None:
    """rackready_vault_password_file from the inventory's plain group_vars/all (relative to
    the inventory's folder): read as YAML, never templated, since the vault is still shut."""
    folder = hosts.parent / "group_vars"
    files = [folder / "all.yml", folder / "all.yaml"]
    if (folder / "all").is_dir():
        files += sorted(f for f in (folder / "all").iterdir() if f.suffix in (".yml", ".yaml"))
    for f in files:
        try:
            data = yaml.load(f.read_text(encoding="utf-8"), Loader=_VaultTolerantLoader)
        except (OSError, UnicodeDecodeError, yaml.YAMLError):
            continue  # absent, or malformed: _check_yaml says where when the hosts are read
        named = data.get("rackready_vault_password_file") if isinstance(data, dict) else None
        if isinstance(named, str) and named:
            return hosts.parent / named  # an absolute path stays itself
    return None


def _vault_secrets(loader, path: Path) -> None:
    """Vault passwords as ansible-playbook would find them (never prompting)."""
    # Ansible on first use: a heavy import, kept out of every command's startup
    from ansible import constants
    from ansible.cli import CLI

    cfg = constants.config
    files = cfg.get_config_value("DEFAULT_VAULT_PASSWORD_FILE")
    ids = list(cfg.get_config_value("DEFAULT_VAULT_IDENTITY_LIST") or [])
    if not files and not ids:
        files = vault_env(path).get("ANSIBLE_VAULT_PASSWORD_FILE")
    if not files and not ids:
        return
    files = [files] if isinstance(files, str) else list(files or [])
    secrets = CLI.setup_vault_secrets(loader, vault_ids=ids, vault_password_files=files,
                                      ask_vault_pass=False, auto_prompt=False)
    loader.set_vault_secrets(secrets)


def _make_loader_class():
    # Ansible on first use: a heavy import, kept out of every command's startup
    from ansible.parsing.dataloader import DataLoader
    from ansible.parsing.vault import is_encrypted

    class Loader(DataLoader):
        """Ansible's loader; an encrypted file without a vault password reads as empty."""

        def __init__(self) -> None:
            super().__init__()
            self.sealed: list[str] = []
            self.has_secrets = False

        def set_vault_secrets(self, vault_secrets) -> None:
            super().set_vault_secrets(vault_secrets)
            self.has_secrets = bool(vault_secrets)

        def _decrypt_if_vault_data(self, b_vault_data, b_file_name=None):
            if is_encrypted(b_vault_data) and not self.has_secrets:
                name = b_file_name.decode(errors="replace") if b_file_name else "?"
                if name not in self.sealed:
                    self.sealed.append(name)
                return b"{}", False
            return super()._decrypt_if_vault_data(b_vault_data, b_file_name)

    return Loader


def _Loader():  # noqa: N802  (a class made on first use: Ansible is imported lazily)
    global _LOADER_CLASS
    if _LOADER_CLASS is None:
        _LOADER_CLASS = _make_loader_class()
    return _LOADER_CLASS()


_LOADER_CLASS = None


def _check_yaml(path: Path) -> None:
    """YAML inventories and their group/host vars must parse; say where they do not."""
    files = [path]
    for sub in ("group_vars", "host_vars"):
        folder = path.parent / sub
        if folder.is_dir():
            files += sorted(folder.rglob("*.yml")) + sorted(folder.rglob("*.yaml"))
    for f in files:
        if f.suffix not in (".yml", ".yaml"):
            continue
        try:
            data = yaml.load(f.read_text(encoding="utf-8"), Loader=_VaultTolerantLoader)
        except UnicodeDecodeError as exc:
            raise UserError(f"{f}: malformed inventory: not UTF-8 text (byte {exc.start})") \
                from None
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f" line {mark.line + 1}" if mark else ""
            problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
            raise UserError(f"{f}:{where}: malformed inventory: {problem}") from None
        if f == path and not isinstance(data, dict):
            raise UserError(f"{f}: malformed inventory: expected a mapping with 'all:'")


class _VaultTolerantLoader(yaml.SafeLoader):
    """Safe YAML that accepts Ansible's !vault tag without decrypting it."""


_VaultTolerantLoader.add_constructor("!vault", lambda loader, node: "<vaulted>")
# a non-scalar !unsafe is refused by construct_scalar itself (ConstructorError)
_VaultTolerantLoader.add_constructor(
    "!unsafe", lambda loader, node: loader.construct_scalar(cast(yaml.ScalarNode, node)))


class _Facts:
    """One host's variables, each templated as Ansible would when it is used.

    A value that is vault-encrypted (inline or in a skipped file) is an error only
    here, when it is needed; the error names the variable, never its value.
    """

    def __init__(self, host: str, v: dict) -> None:
        self.host = host
        self.v = v
        self._templar: Any = None  # ansible's Templar, made on first use

    def has(self, key: str) -> bool:
        return self.v.get(key) is not None

    def get(self, key: str, default=None):
        # Ansible on first use: a heavy import, kept out of every command's startup
        from ansible.errors import AnsibleError

        raw = self.v.get(key)
        if raw is None:
            return default
        try:
            value = self._template(raw)
        except AnsibleError as exc:
            text = str(exc)
            if "vault" in text.lower() or (self.v.get("_rackready_sealed")
                                          and "is undefined" in text):
                sealed = self.v.get("_rackready_sealed") or ()
                where = f" (encrypted file: {sealed[0]})" if sealed else ""
                raise UserError(f"host '{self.host}': {key} needs a vault password and none "
                                f"is given{where}; {VAULT_HINT}") from None
            first = text.strip().splitlines()[0] if text.strip() else type(exc).__name__
            raise UserError(f"host '{self.host}': {key} cannot be templated: {first}") \
                from None
        return default if value is None else value

    def text(self, key: str, default: str | None = None) -> str:
        value = self.get(key, default)
        if value is None:
            raise UserError(f"host '{self.host}': {key} is not set")
        return str(value)

    def _template(self, raw):
        # Ansible on first use: a heavy import, kept out of every command's startup
        from ansible.parsing.yaml.objects import AnsibleVaultEncryptedUnicode

        if isinstance(raw, AnsibleVaultEncryptedUnicode):
            return str(raw)  # decrypts, or raises "no vault secrets"
        if isinstance(raw, str) and ("{{" in raw or "{%" in raw):
            if self._templar is None:
                # Ansible on first use: a heavy import, kept out of every command's startup
                from ansible.template import Templar

                self._templar = Templar(loader=self.v.get("_rackready_loader"),
                                        variables=self.v)
            return self._templar.template(raw, fail_on_undefined=True)
        return raw
