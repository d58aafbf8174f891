"""Where a database lives: a local directory, or a prefix on object storage (s3, gs, az).

LanceDB opens either kind itself; this module does the rest for probembed's own small files
(a collection's pipeline copy and agreement record), which are kept with the database so any
machine that opens the same URI can search it, and it picks where files derived from the table
(search graphs) are cached: beside the table for a directory, under the user cache directory,
keyed by a hash of the URI, for object storage. The object-store side goes through
`pyarrow.fs`, configured from the same `storage_options` LanceDB gets (or, without them, the
standard environment variables both read: AWS_ACCESS_KEY_ID, AWS_SECRET_ACCESS_KEY,
AWS_REGION, AWS_ENDPOINT_URL, ...).
"""

from __future__ import annotations

import difflib
import hashlib
import os
import re
import shutil
import tempfile
import urllib.parse
import urllib.request
import warnings
from collections.abc import Mapping
from datetime import timedelta
from pathlib import Path
from typing import Any, cast

import pyarrow.fs as pafs

from probembed import atomic
from probembed.cache import default_cache_dir
from probembed.store.errors import (
    NoDatabaseError,
    StorageUnavailableError,
    StoreError,
    credentials_refusal,
    without_userinfo,
)

#: Storage options set for every database on object storage where the user gave none
#: (object_store's `timeout` and `connect_timeout`, lance's `client_retry_timeout` in seconds).
#: Without them a hung store (accepting connections, never answering) held each call for
#: minutes: object_store waits 30 s four times, and lance tries a listing six times; a CLI
#: ingest sat silent for 7 minutes and more, and a service request past its client's timeout.
#: With them the slowest failing step, such a listing, gives up after about a minute, while a
#: healthy store's call (a small object or a ranged read) takes well under 5 s.
TIMEOUTS = {"timeout": "5s", "connect_timeout": "2s", "client_retry_timeout": "10"}
#: The prefixes object_store also reads a client option under (`aws_timeout`, `AWS_TIMEOUT`).
_CLOUDS = ("aws", "azure", "google")
#: URI schemes LanceDB stores tables under on object storage.
REMOTE_SCHEMES = ("s3", "gs", "az")
#: An URI scheme (RFC 3986): what makes `NAME://...` a URI rather than a relative path.
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*")
#: probembed's own files inside the database, beside LanceDB's tables.
OWN_DIR = ".probembed"
#: The collection's own file whose storing time tells one incarnation of it from another.
MIRRORED = "pipeline/pipeline.json"
#: The object that marks a prefix as a probembed database; writing it probes writability.
MARKER_FILE = "database.json"
MARKER = b'{"written_by": "probembed"}\n'
#: LanceDB / object_store storage option names (lower case) -> pyarrow S3FileSystem arguments.
_S3_OPTIONS = {
    "aws_access_key_id": "access_key",
    "access_key_id": "access_key",
    "aws_secret_access_key": "secret_key",
    "secret_access_key": "secret_key",
    "aws_session_token": "session_token",
    "session_token": "session_token",
    "aws_region": "region",
    "region": "region",
    "aws_endpoint": "endpoint_override",
    "endpoint": "endpoint_override",
    "aws_endpoint_url": "endpoint_override",
    "endpoint_url": "endpoint_override",
}
#: How object_store reads a true boolean option (`allow_http=true`), case aside.
_TRUTHY = ("1", "true", "on", "yes", "y")
#: The same for Azure (pyarrow AzureFileSystem); GCS credentials come from the environment.
_AZ_OPTIONS = {
    "azure_storage_account_name": "account_name",
    "account_name": "account_name",
    "azure_storage_account_key": "account_key",
    "account_key": "account_key",
}

#: Other keys LanceDB's object store reads (object_store's S3, Azure and GCS config keys with
#: their aliases, its client options, lance's retry options): with the two tables above, what
#: a storage option is checked against for a misspelling.
_OTHER_OPTIONS = frozenset(
    """
    allow_http allow_invalid_certificates connect_timeout timeout user_agent proxy_url
    proxy_ca_certificate proxy_excludes pool_idle_timeout pool_max_idle_per_host http1_only
    http2_only http2_keep_alive_interval http2_keep_alive_timeout
    http2_keep_alive_while_idle http2_max_frame_size randomize_addresses
    default_content_type download_retry_count client_max_retries client_retry_timeout
    aws_default_region default_region aws_token token aws_bucket aws_bucket_name bucket
    bucket_name aws_virtual_hosted_style_request virtual_hosted_style_request aws_s3_express
    s3_express aws_imdsv1_fallback imdsv1_fallback aws_metadata_endpoint metadata_endpoint
    aws_unsigned_payload unsigned_payload aws_checksum_algorithm checksum_algorithm
    aws_container_credentials_relative_uri aws_container_credentials_full_uri
    aws_container_authorization_token_file aws_skip_signature skip_signature
    aws_copy_if_not_exists copy_if_not_exists aws_conditional_put conditional_put
    aws_disable_tagging disable_tagging aws_request_payer request_payer
    aws_server_side_encryption aws_sse_kms_key_id aws_sse_bucket_key_enabled
    aws_sse_customer_key_base64 aws_sts_endpoint aws_web_identity_token_file aws_role_arn
    aws_role_session_name azure_storage_access_key azure_storage_master_key access_key
    master_key azure_storage_client_id azure_client_id client_id azure_storage_client_secret
    azure_client_secret client_secret azure_storage_tenant_id azure_storage_authority_id
    azure_tenant_id azure_authority_id tenant_id authority_id azure_storage_sas_key
    azure_storage_sas_token sas_key sas_token azure_storage_token bearer_token
    azure_storage_use_emulator azure_use_emulator use_emulator azure_storage_endpoint
    azure_endpoint azure_msi_endpoint azure_identity_endpoint identity_endpoint msi_endpoint
    azure_object_id object_id azure_msi_resource_id msi_resource_id
    azure_federated_token_file federated_token_file azure_use_fabric_endpoint
    use_fabric_endpoint azure_use_azure_cli use_azure_cli azure_skip_signature
    azure_container_name container_name azure_disable_tagging azure_fabric_token_service_url
    azure_fabric_workspace_id azure_fabric_session_token azure_fabric_cluster_identifier
    google_service_account service_account google_service_account_path service_account_path
    google_service_account_key service_account_key google_bucket google_bucket_name
    google_application_credentials google_skip_signature
    """.split()  # noqa: SIM905 (a list literal would be one line per key)
)
_KNOWN_OPTIONS = frozenset(_S3_OPTIONS) | frozenset(_AZ_OPTIONS) | _OTHER_OPTIONS
#: Keys a warning about an unknown one names, for a key close to none of them.
_EXAMPLES = "aws_endpoint, aws_region, aws_access_key_id, allow_http, azure_storage_account_name"
#: The prefixes of a store's own keys, by URI scheme: what a misspelt key is matched against.
_FAMILIES = {"s3": ("aws_",), "az": ("azure_",), "gs": ("google_",)}


def database_target(target: str | os.PathLike) -> str | Path:
    """What a database argument names: object storage (its URI, kept as given) or a directory
    (a `file://` URI read as its path). Any other scheme is refused before anything is made:
    taken for a directory, `file://` and `s3a://` URIs had left folders named `file:` and
    `s3a:` in the working directory, apart from the tables LanceDB put elsewhere."""
    if not isinstance(target, str):
        return Path(target)
    if not target.strip():
        raise StoreError("database path is empty: give a directory or an object-store URI")
    if target[:5].lower() == "file:":  # file:///abs, file:/abs (RFC 8089), file://localhost/
        url = urllib.parse.urlsplit(target)
        if url.netloc not in ("", "localhost") or not url.path or url.query or url.fragment:
            raise StoreError(f"database URI {target!r} names no local directory (file:///PATH)")
        return Path(urllib.request.url2pathname(url.path))
    scheme, sep, _ = target.partition("://")
    if not sep or not _SCHEME.fullmatch(scheme) or len(scheme) == 1:  # C://x: a drive
        return Path(target)
    if scheme.lower() in REMOTE_SCHEMES:
        return target
    raise StoreError(
        f"database URI {target!r}: probembed stores on {', '.join(REMOTE_SCHEMES)} "
        f"(s3://BUCKET/PREFIX) or a directory, not {scheme!r}"
    )


def with_timeouts(target: str | os.PathLike, options: Mapping[str, str]) -> dict[str, str]:
    """The user's storage options plus the `TIMEOUTS` they left unset, for object storage (a
    directory takes no options): so a hung store fails a call instead of holding it."""
    if not isinstance(database_target(target), str):
        return dict(options)
    given = given_timeouts(options)
    return {**{k: v for k, v in TIMEOUTS.items() if k not in given}, **options}


def given_timeouts(options: Mapping[str, str]) -> dict[str, str]:
    """The client timeouts the user set, by their bare names, in every spelling object_store
    reads: a key (`timeout`, `aws_timeout`), else a variable (`AWS_TIMEOUT`); a default set
    over `aws_timeout` or the variable would have won over the user's."""
    found = {}
    keyed = {k.lower(): v for k, v in options.items()}
    for name in TIMEOUTS:
        spellings = [name, *(f"{cloud}_{name}" for cloud in _CLOUDS)]
        value = next((keyed[k] for k in spellings if k in keyed), None)
        if value is None:
            value = next(
                (os.environ[k.upper()] for k in spellings[1:] if k.upper() in os.environ), None
            )
        if value is not None:
            found[name] = value
    return found


def refuse_local_options(target: str | os.PathLike, options: Mapping[str, str]) -> None:
    """Refuse storage options beside a directory, which LanceDB would ignore unsaid (a server
    took them and failed only once loading, or a typo'd URI read as a directory kept them)."""
    if options and not isinstance(database_target(target), str):
        raise StoreError(
            f"storage options {sorted(options)} apply to object storage (s3://, gs://, az://), "
            f"not to the directory {target}"
        )


def parse_storage_options(pairs: list[str] | None) -> dict[str, str]:
    """KEY=VALUE strings (from --storage-option) as a dict, refusing one without '='."""
    options: dict[str, str] = {}
    for pair in pairs or []:
        key, sep, value = pair.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"storage option {pair!r} is not KEY=VALUE")
        options[key.strip()] = value
    return options


class Location:
    """A database's root: LanceDB's URI, probembed's files in it, and the local derived cache."""

    def __init__(
        self, target: str | os.PathLike, storage_options: Mapping[str, str] | None = None
    ) -> None:
        given = {str(k): str(v) for k, v in (storage_options or {}).items()}
        named = database_target(target)
        #: What LanceDB gets: the given options, and `TIMEOUTS` on object storage.
        self.storage_options = with_timeouts(named, given)
        self.remote = isinstance(named, str)
        if isinstance(named, str):
            scheme, _, rest = named.partition("://")
            self.uri = f"{scheme}://{rest.rstrip('/')}"  # `s3://` stays whole in messages
            self.path: Path | str = self.uri
            self._fs, self._root = _remote_filesystem(self.uri, self.storage_options)
            _warn_misspelt(self.storage_options, scheme.lower())
        else:
            refuse_local_options(target, self.storage_options)
            self.path = named
            self.uri = str(self.path)

    def prepare(self, create: bool) -> None:
        """Create the directory (create) or require it; for object storage, require the bucket,
        and a prefix that holds something (create: the database's marker object is written
        where it is missing, so a database made and left empty is still one when it is next
        opened, and an existing one opens with read-only credentials)."""
        if self.remote:
            found = self._refuse_object_in_place()
            marker = f"{self._root}/{OWN_DIR}/{MARKER_FILE}"
            if create:
                if self._info(marker).type != pafs.FileType.File:  # once: read-only keys open
                    self._call(lambda: _write(self._fs, marker, MARKER), f"write {marker}")
            elif found.type == pafs.FileType.NotFound and "/" in self._root:
                why = "nothing is stored under that prefix"  # reading: a mistyped prefix
                raise NoDatabaseError(self.uri, why, self.uri, remote=True)
        elif create:
            _make_directory(cast(Path, self.path))  # local: a Path
        elif cast(Path, self.path).is_file():  # `--db docs.jsonl`: the corpus in its place
            where, why = str(self.path), "it is a file; a database is a directory"
            raise NoDatabaseError(where, why, where, after=" once that file is moved away")
        elif not cast(Path, self.path).is_dir():
            where = str(self.path)
            raise NoDatabaseError(where, "the directory does not exist", where)

    def refuse_uncreatable(self) -> None:
        """Refuse a database that could not be made where it is named, before anything is
        (the service checks before its models load): a missing bucket or an object in the
        prefix's place, a file in the directory's place or above it."""
        if self.remote:
            self._refuse_object_in_place()
            return
        path = cast(Path, self.path)
        if any(p.is_file() for p in (path, *path.parents)):
            raise StoreError(_uncreatable(path))

    def _refuse_object_in_place(self) -> pafs.FileInfo:
        """Require the bucket, and refuse an object where the prefix is (`s3://b/docs.jsonl`);
        what is at the prefix."""
        bucket = self._root.split("/", 1)[0]
        info = self._call(lambda: self._fs.get_file_info(bucket), f"reach {bucket}")
        if info.type != pafs.FileType.Directory:
            raise StoreError(f"no database at {self.uri}: bucket {bucket!r} does not exist")
        found = self._call(lambda: self._fs.get_file_info(self._root), f"read {self.uri}")
        if found.type == pafs.FileType.File:
            why = "it is an object; a database is a prefix that holds its collections"
            raise NoDatabaseError(self.uri, why, self.uri, remote=True, after=" elsewhere")
        return found

    def connect(self, consistency: timedelta | None = None) -> Any:
        """The LanceDB connection to this database; with `consistency`, its tables look for a
        newer version on a read at most that often (0: every read), else only when told."""
        import lancedb

        options: dict[str, Any] = {"read_consistency_interval": consistency}
        if self.remote:
            options["storage_options"] = self.storage_options or None
        return lancedb.connect(self.uri, **options)

    def table_folder(self, collection: str) -> Path | str:
        """Where LanceDB keeps a collection's table: `NAME.lance` in the database (a folder,
        or a prefix of the object store's)."""
        if self.remote:
            return f"{self.uri}/{collection}.lance"
        return cast(Path, self.path) / f"{collection}.lance"

    def own_dir(self, collection: str) -> Path:
        """Local directory of a collection's own files: the database's, or a cache mirror."""
        if not self.remote:
            return cast(Path, self.path) / OWN_DIR / collection
        return self._mirror() / collection

    def _mirror(self) -> Path:
        """This machine's cache of a database on object storage, keyed by its URI."""
        key = hashlib.sha256(self.uri.encode()).hexdigest()[:16]
        return default_cache_dir() / "remote" / key

    def holds_anything(self) -> bool:
        """Whether anything is where this database would be made: a file, or a folder that
        holds files; on object storage, an object there or under the prefix (a missing
        bucket is refused)."""
        if not self.remote:
            path = cast(Path, self.path)
            return path.is_file() or (path.is_dir() and any(path.iterdir()))
        self._refuse_object_in_place()
        listed = pafs.FileSelector(self._root, allow_not_found=True)
        return bool(self._call(lambda: self._fs.get_file_info(listed), f"list {self.uri}"))

    def clear(self) -> None:
        """Delete every object under a database's prefix on object storage, and this
        machine's mirror of it (a backup that failed part-way, into a prefix it found
        empty)."""
        self._call(lambda: self._fs.delete_dir(self._root), f"delete {self.uri}", missing_ok=True)
        shutil.rmtree(self._mirror(), ignore_errors=True)

    def derived_dir(self, collection: str) -> Path:
        """Local directory for files derived from the table (search graphs).

        Remotely, graphs are cached per incarnation of the collection (when its pipeline copy
        was stored, which happens at its creation): another machine may drop and re-create
        it, and a graph of the old table must not serve the new one at the same version.
        """
        if not self.remote:
            return self.own_dir(collection)
        info = self._info(self._key(collection, MIRRORED))
        stamp = "unrecorded" if info.type != pafs.FileType.File else str(info.mtime_ns)
        return self.own_dir(collection) / f"graphs-{stamp}"

    def name(self, collection: str, file: str) -> Path | str:
        """Where one of a collection's own files is kept, for messages (a path or a URI)."""
        if not self.remote:
            return self.own_dir(collection) / file
        return f"{self.uri}/{OWN_DIR}/{collection}/{file}"

    def read_bytes(self, collection: str, file: str) -> bytes | None:
        """A collection's own file, or None if there is none."""
        if not self.remote:
            try:
                return Path(self.name(collection, file)).read_bytes()
            except FileNotFoundError:
                return None
        key = self._key(collection, file)
        if self._info(key).type != pafs.FileType.File:
            return None
        return self._call(lambda: _read(self._fs, key), f"read {key}")

    def write_bytes(self, collection: str, file: str, data: bytes) -> None:
        """Replace a collection's own file whole (a rename locally; one PUT on object storage)."""
        if not self.remote:
            target = Path(self.name(collection, file))
            target.parent.mkdir(parents=True, exist_ok=True)
            atomic.write_bytes(target, data)
            return
        key = self._key(collection, file)
        self._call(lambda: _write(self._fs, key, data), f"write {key}")

    def has_file(self, collection: str, file: str) -> bool:
        """Whether a collection's own file exists."""
        if not self.remote:
            return Path(self.name(collection, file)).is_file()
        return self._info(self._key(collection, file)).type == pafs.FileType.File

    def publish(self, collection: str, folder: str, last: str) -> None:
        """Store a folder written in the local derived directory with the database (remote).

        A reader takes the folder as present once `last` is there, so `last` is written after
        the rest, and an older copy's `last` is removed first: no reader mixes two copies.
        Locally the derived directory is the database's own, so there is nothing to do.
        """
        if not self.remote:
            return
        local = self.own_dir(collection) / folder
        prefix = self._key(collection, folder)
        self._call(lambda: self._fs.delete_file(f"{prefix}/{last}"), "replace", missing_ok=True)
        self._call(lambda: self._fs.delete_dir_contents(prefix), "replace", missing_ok=True)
        files = sorted(p for p in local.rglob("*") if p.is_file())
        for path in sorted(files, key=lambda p: p.relative_to(local).as_posix() == last):
            key = f"{prefix}/{path.relative_to(local).as_posix()}"
            self._call(lambda k=key, p=path: _write(self._fs, k, p.read_bytes()), f"write {key}")

    def fetch(self, collection: str, folder: str) -> None:
        """Mirror a stored folder into the local derived directory, swapped in whole (remote)."""
        if not self.remote:
            return
        local = self.own_dir(collection) / folder
        prefix = self._key(collection, folder)
        selector = pafs.FileSelector(prefix, allow_not_found=True, recursive=True)
        infos = self._call(lambda: self._fs.get_file_info(selector), f"list {prefix}")
        with atomic.staging_dir(local, "fetching") as staged:
            for info in infos:
                if info.type == pafs.FileType.File:
                    target = staged / info.path[len(prefix) + 1 :]
                    target.parent.mkdir(parents=True, exist_ok=True)
                    data = self._call(lambda p=info.path: _read(self._fs, p), f"read {info.path}")
                    target.write_bytes(data)
            atomic.replace_dir(staged, local)

    def remove(self, collection: str) -> None:
        """Delete a collection's own files and its local derived files."""
        if self.remote:
            prefix = self._key(collection, "")[:-1]
            self._call(lambda: self._fs.delete_dir(prefix), f"delete {prefix}", missing_ok=True)
        shutil.rmtree(self.own_dir(collection), ignore_errors=True)

    def can_write(self) -> bool:
        """Whether writing works: a temporary file locally, the database's marker object remotely.

        Creating something is the only check that is also true for root, read-only mounts and
        bucket policies. On object storage a deleted probe would leave a directory marker
        behind (pyarrow keeps the parent "directory"), so the probe is the one object every
        probembed database on object storage holds anyway, rewritten with the same bytes.
        """
        if not self.remote:
            return _can_write(cast(Path, self.path))
        key = f"{self._root}/{OWN_DIR}/{MARKER_FILE}"
        try:
            _write(self._fs, key, MARKER)
        except OSError:
            return False
        return True

    def _key(self, collection: str, file: str) -> str:
        """The object key of one of a collection's own files."""
        return f"{self._root}/{OWN_DIR}/{collection}/{file}"

    def _info(self, key: str) -> pafs.FileInfo:
        """What is at an object key (FileType.NotFound when nothing is)."""
        return self._call(lambda: self._fs.get_file_info(key), f"look up {key}")

    def _call(self, run: Any, what: str, missing_ok: bool = False) -> Any:
        """Run a pyarrow.fs call, turning its OSError into a StoreError naming the database: the
        credentials refused (`credentials_refusal`), else the storage unavailable."""
        try:
            return run()
        except FileNotFoundError:
            if missing_ok:
                return None
            raise
        except OSError as exc:
            if missing_ok and "not found" in str(exc).lower():
                return None
            message = str(exc).splitlines()[0] if str(exc) else type(exc).__name__
            refused = credentials_refusal(message, self.uri)
            if refused is not None:  # not the storage failing: no retry gets through
                raise refused from exc
            raise StorageUnavailableError(f"database {self.uri}: cannot {what}: {message}") from exc


def _warn_misspelt(options: Mapping[str, str], scheme: str) -> None:
    """LanceDB ignores a key it does not know, so a misspelt credential or region fell back to
    the environment's without a word: say so of every key it is not known to read, naming a
    known key of this store one letter or two off (`s3_endpoint` was told Azure's
    `msi_endpoint`) or else a few it reads."""
    family = _FAMILIES.get(scheme, ())
    mine = [k for k in _KNOWN_OPTIONS if k.startswith(family)] or list(_KNOWN_OPTIONS)
    for key in options:
        if key.lower() in _KNOWN_OPTIONS or key.lower().startswith("lance"):  # lance's own
            continue
        near = difflib.get_close_matches(key.lower(), mine, n=1, cutoff=0.85)
        guess = f"did you mean {near[0]!r}?" if near else f"known keys include {_EXAMPLES}"
        warnings.warn(
            f"storage option {key!r} is not a key LanceDB's object store is known to read "
            f"(an unknown key is ignored); {guess}",
            stacklevel=3,
        )


def _remote_filesystem(uri: str, options: Mapping[str, str]) -> tuple[pafs.FileSystem, str]:
    """A pyarrow file system for an object-store URI, and the root path inside it."""
    scheme, _, rest = uri.partition("://")
    scheme = scheme.lower()
    if not rest.strip("/"):
        raise StoreError(f"database URI {uri!r} names no bucket ({scheme}://BUCKET/PREFIX)")
    if "" in rest.rstrip("/").split("/"):  # pyarrow refuses it deep inside a first read
        raise StoreError(f"database URI {uri!r} has an empty part ('//') in its path")
    odd = sorted({c for c in rest if c in "#?%"}) + [s for s in rest.split("/") if s in (".", "..")]
    if odd:  # LanceDB reads the URI as a URL (and normalises it), its own files would not
        raise StoreError(
            f"database URI {uri!r} holds {', '.join(map(repr, odd))}: LanceDB would read it "
            "as a URL and put the tables elsewhere than probembed's own files; name the "
            "prefix without them"
        )
    if scheme == "s3":
        _check_endpoint(options)
    try:
        if scheme == "s3":
            # delayed open: a small file is one PutObject, not a multipart upload
            return pafs.S3FileSystem(allow_delayed_open=True, **_s3_arguments(options)), rest
        if scheme == "az":
            return pafs.AzureFileSystem(**_mapped(options, _AZ_OPTIONS)), rest
        fs, root = pafs.FileSystem.from_uri(uri)
        return fs, root
    except (OSError, ValueError, TypeError) as exc:
        raise StoreError(f"cannot open object storage for {uri}: {exc}") from exc


def _s3_arguments(options: Mapping[str, str]) -> dict[str, Any]:
    """pyarrow S3FileSystem arguments from LanceDB's storage options, else the environment
    (an endpoint's scheme is there: `_check_endpoint`)."""
    arguments = _mapped(options, _S3_OPTIONS)
    endpoint, _ = _endpoint(options)
    if endpoint:
        arguments["scheme"], _, arguments["endpoint_override"] = endpoint.partition("://")
    return arguments


def _endpoint(options: Mapping[str, str]) -> tuple[str | None, str]:
    """The S3 endpoint LanceDB reaches (the storage options', else the environment's) and
    where it was set, or (None, "")."""
    for key, value in options.items():
        if _S3_OPTIONS.get(key.lower()) == "endpoint_override" and value:
            return value, f"storage option {key}"
    for name in ("AWS_ENDPOINT_URL", "AWS_ENDPOINT"):
        if os.environ.get(name):
            return os.environ[name], name
    return None, ""


def _check_endpoint(options: Mapping[str, str]) -> None:
    """Refuse, before any call, an S3 endpoint LanceDB cannot use: one without a scheme
    (LanceDB panicked, a Rust backtrace and exit 1) or plain HTTP without allow_http (a
    700-character Rust dump ending `BadScheme`)."""
    endpoint, source = _endpoint(options)
    if not endpoint:
        return
    endpoint = without_userinfo(endpoint)
    scheme, sep, _ = endpoint.partition("://")
    if not sep:
        raise StoreError(
            f"S3 endpoint {endpoint!r} ({source}) has no scheme: give it as "
            f"http://{endpoint} (with allow_http=true) or https://{endpoint}"
        )
    lowered = {k.lower(): v for k, v in options.items()}
    allowed = lowered.get("allow_http", lowered.get("aws_allow_http"))
    allowed = allowed if allowed is not None else os.environ.get("AWS_ALLOW_HTTP", "")
    if scheme.lower() == "http" and allowed.strip().lower() not in _TRUTHY:
        raise StoreError(
            f"S3 endpoint {endpoint!r} ({source}) is plain HTTP, which LanceDB refuses unless "
            "told: add the storage option allow_http=true (--storage-option allow_http=true) "
            "or set AWS_ALLOW_HTTP=true"
        )


def _mapped(options: Mapping[str, str], names: Mapping[str, str]) -> dict[str, str]:
    """The storage options pyarrow understands, under pyarrow's argument names."""
    return {names[k.lower()]: v for k, v in options.items() if k.lower() in names}


def _read(fs: pafs.FileSystem, key: str) -> bytes:
    """The whole content of one object."""
    with fs.open_input_stream(key) as stream:
        return stream.read()


def _write(fs: pafs.FileSystem, key: str, data: bytes) -> None:
    """One object with this content (a single PUT: readers see the old or the new one)."""
    with fs.open_output_stream(key) as stream:
        stream.write(data)


def _uncreatable(path: Path) -> str:
    """Why a database directory cannot be made: it, or a folder above it, is a file."""
    blocking = next((p for p in (path, *path.parents) if p.is_file()), path)
    return (
        f"cannot create database directory {path}: {blocking} is a file; a database is a directory"
    )


def _make_directory(path: Path) -> None:
    """Create the database directory, explaining a failure in terms of the path."""
    try:
        path.mkdir(parents=True, exist_ok=True)
    except (FileExistsError, NotADirectoryError) as exc:  # it, or a folder above, is a file
        raise StoreError(_uncreatable(path)) from exc
    except OSError as exc:
        raise StoreError(f"cannot create database directory {path}: {exc.strerror}") from exc
    if not path.is_dir():
        raise StoreError(f"database path {path} exists but is not a directory")


def _can_write(path: Path) -> bool:
    """Try to create a file: the only check that is also true for root and read-only mounts."""
    try:
        with tempfile.NamedTemporaryFile(dir=path, prefix=".probe-"):
            return True
    except OSError:
        return False
