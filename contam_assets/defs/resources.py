"""Resources shared by every domain: settings (paths, preset) and the DuckDB file."""

from __future__ import annotations

from contextlib import contextmanager
from pathlib import Path

import dagster as dg
from pydantic import Field

from contam_assets import settings, store
from contam_assets.detector.config import KNOBS, ConfigError, DetectConfig, parse_knob, preset, with_parts
from contam_assets.settings import DEFAULT_TASKS_DIR, PROJECT_ROOT  # noqa: F401 - the names users import here
from contam_assets.sources.catalogue import resolve_tasks_dir
from contam_assets.store.location import Location, scheme_of, work_folder
from contam_assets.store.location import resolve as resolve_location


def _knob_fields() -> dict:
    fields = {}
    for k in KNOBS:
        kind = type(getattr(DetectConfig(), k.field))
        kind = str if k.field in ("decay_start", "decay_end") else kind  # "20", or "none" to turn it off
        fields[k.field] = (kind | None, Field(None, description=f"{k.help}" + (f" (decon: {k.decon})" if k.decon else "")))
    return fields


# Every detector knob as an optional field (None = the preset's value, or the decon config's), named as in
# DetectConfig; `contam detect` flags and decon config keys map onto the same fields (detector/config.KNOBS).
DetectorKnobs = dg.Config.__class__("DetectorKnobs", (dg.Config,), {
    "__annotations__": {name: kind for name, (kind, _) in _knob_fields().items()},
    **{name: default for name, (_, default) in _knob_fields().items()},
    "__doc__": "Detector knobs that override the preset (and a decon config); unset fields keep their value.",
    "__module__": __name__,
})


def remote_out(out_dir: str) -> Location | None:
    """The store location of an output given as a URL (s3://, gs://, ...); None for a folder."""
    if not scheme_of(str(out_dir)):
        return None
    loc = resolve_location(str(out_dir), "out", must_exist=False)
    return None if loc.is_local else loc


def out_folder(out_dir: str) -> Path:
    """The local folder of an output: the folder itself, or a remote output's work folder (store/location.py)."""
    loc = remote_out(out_dir)
    if loc is not None:
        return work_folder(loc)
    if scheme_of(str(out_dir)):  # file://
        return Path(resolve_location(str(out_dir), "out", must_exist=False).root)
    return Path(out_dir).resolve()


class ContamSettings(dg.ConfigurableResource):
    """Where things are.  Every field is a setting of contam_assets/settings.py (its variable, flag and default
    there; docs/settings.md)."""

    out_dir: str = settings.DEFAULT_OUT  # contam.duckdb, index cache, report.html, mix/
    pool_dir: str = ""  # a folder, file, glob or URL (store/location.py; "" = <out_dir>/demo_pool)
    benchmarks_dir: str = ""  # benchmark files ("" = embedded default: HumanEval from its package)
    tasks_dir: str = ""  # task specs ("" = the project's data/tasks)
    tasks: str = ""  # comma-separated task names to use ("" = every available task)
    preset: str = "default"  # default | olmo-web | olmo-synth | thorough
    parts: str = ""  # comma-separated thorough parts added to the preset (detector.config.THOROUGH_PARTS)
    crosslingual: bool = False  # the part `crosslingual` too (the setting `crosslingual`, --crosslingual; docs/crosslingual.md)
    removal: str = "document"  # document (drop it) | span (cut the matched spans, store/cuts.py)
    unescape: bool | None = None  # for exact decon parity (None: the preset's)
    tokenizer: str = ""  # cl100k | word | bytes ("" = the preset's)
    content_key: str = "text"  # (dots name a nested field, as in decon)
    experiments_dir: str = ""  # "<out_dir>/experiments" when empty
    evals_dir: str = ""  # a decon reference folder (or glob) indexed beside / instead of the registry
    decon_config: str = ""  # a decon YAML config; sets decon mode (docs/decon.md)
    decon_report_dir: str = ""  # decon mode: decon-shaped report files (the config's report_output_dir)
    decon_cleaned_dir: str = ""  # decon mode: purified training files (cleaned_output_dir; default the report dir)
    purify: bool = False  # decon mode: write purified training files
    follow_symlinks: bool = False  # read symlinks that lead outside the pool
    lm_eval_tasks: str = ""  # lm-evaluation-harness tasks or groups (docs/benchmarks.md)
    lm_eval_include: str = ""  # a folder of the user's own lm-eval task YAMLs
    trust_task_code: bool = False  # build lm-eval tasks whose !function runs the include's code
    allow_missing: bool = False  # a task with no source files is a warning, not an error
    knobs: DetectorKnobs = Field(default_factory=DetectorKnobs,
                                 description="detector knobs over the preset (and the decon config)")

    @property
    def out_path(self) -> Path:
        """The local output folder: out_dir, or for a remote out_dir (a URL) its local work folder."""
        return out_folder(self.out_dir)

    @property
    def out_location(self) -> Location | None:
        """A remote output (out_dir is a URL: store/outbox.py writes to it as the run goes), else None."""
        return remote_out(self.out_dir)

    @property
    def db_path(self) -> Path:
        return self.out_path / "contam.duckdb"

    @property
    def pool_location(self) -> Location:
        """Where the pool is (store/location.py): a folder, a file, a glob or a URL."""
        if not self.pool_dir:
            return Location("file", str(self.out_path / "demo_pool"))
        return resolve_location(self.pool_dir, "pool", must_exist=False)

    @property
    def pool_path(self) -> Path:
        """What the pool's units are read under: the local folder, or a remote pool's URL (store/location.StoreRoot:
        its units are read in place, never copied)."""
        return self.pool_location.read_root

    @property
    def pool_pattern(self) -> str:
        """The glob (or single file name) that selects the pool's units under pool_path ('' = every file)."""
        return self.pool_location.pattern

    @property
    def follow_links(self) -> bool:
        """Symlinks out of the pool are read (the follow_symlinks setting).  A Hub cache snapshot's links into its own
        blobs/ are read without it (store/pool.py); a snapshot link anywhere else is skipped as outside_pool."""
        return self.follow_symlinks

    @property
    def benchmarks_path(self) -> Path | None:
        return Path(self.benchmarks_dir).resolve() if self.benchmarks_dir else None

    @property
    def tasks_path(self) -> Path:
        return resolve_tasks_dir(self.tasks_dir)

    @property
    def task_filter(self) -> list[str]:
        return [t.strip() for t in self.tasks.split(",") if t.strip()]

    @property
    def evals_path(self) -> Path | None:
        if self.evals_dir:
            return Path(self.evals_dir).resolve()
        d = self.decon().paths.get("evals_dir") if self.decon_config else None
        return Path(d).resolve() if d else None

    @property
    def uses_registry(self) -> bool:
        """The task registry is used unless only a decon reference folder was given."""
        return not (self.evals_path or self.lm_eval_list) or bool(self.benchmarks_dir or self.tasks_dir or self.tasks)

    @property
    def lm_eval_list(self) -> list[str]:
        return [t.strip() for t in self.lm_eval_tasks.split(",") if t.strip()]

    def decon(self):
        """The decon config file, parsed (ConfigError with the key and the fix)."""
        from contam_assets.decon.config import load_decon_config

        return load_decon_config(self.decon_config)

    def knob_overrides(self) -> dict:
        """The knobs set on this resource (legacy tokenizer/unescape fields included)."""
        out = {k: v for k, v in self.knobs.model_dump().items() if v is not None}
        if self.tokenizer and "tokenizer" not in out:
            out["tokenizer"] = self.tokenizer
        if self.unescape is not None and "unescape" not in out:
            out["unescape"] = self.unescape
        return {k: parse_knob(k, v) for k, v in out.items()}

    def detect_config(self) -> tuple[DetectConfig, dict[str, str]]:
        """The detector configuration: the preset, then the decon config file, then the knobs set here;
        and where each knob's value came from."""
        cfg = with_parts(preset(self.preset), self.part_list)
        origins: dict[str, str] = {}
        if self.decon_config:
            dc = self.decon()
            cfg = cfg.replace(**dc.overrides)
            origins.update(dict.fromkeys(dc.overrides, f"decon config {Path(self.decon_config).name}"))
        over = self.knob_overrides()
        if over:
            cfg = cfg.replace(**over)
            origins.update(dict.fromkeys(over, "set"))
        return cfg, origins

    @property
    def part_list(self) -> list[str]:
        parts = [t.strip() for t in self.parts.split(",") if t.strip()]
        return parts + ["crosslingual"] if self.crosslingual and "crosslingual" not in parts else parts

    @property
    def experiments_path(self) -> Path:
        return Path(self.experiments_dir).resolve() if self.experiments_dir else self.out_path / "experiments"

    @classmethod
    def from_env(cls, flags: dict | None = None, env=None, **overrides) -> "ContamSettings":
        """The settings by the one rule of contam_assets/settings.py: ``flags`` (by setting name; None = not given)
        over the environment over the decon config (every field the decon_config setting's file holds, as
        `contam detect` applies them) over the defaults.  ``overrides`` are set as given, over all of them."""
        flags = {k: v for k, v in (flags or {}).items() if v is not None}
        config = decon_config_values(settings.resolve("decon_config", flags.get("decon_config"), env))
        values = {name: settings.resolve(name, flags.get(name), env, config) for name in SETTING_FIELDS}
        values["knobs"] = DetectorKnobs(**(values["knobs"] or {}) | flags.get("knob_values", {}))
        values.update({k: v for k, v in overrides.items() if v is not None})
        return cls(**values)


def decon_config_values(path: str) -> dict:
    """The settings a decon config file holds (settings.decon_values); {} when there is none, or when it cannot be
    read: then the steps that read it fail with its message (ContamSettings.decon)."""
    if not path:
        return {}
    from contam_assets.decon.config import load_decon_config

    try:
        return settings.decon_values(load_decon_config(path))
    except (ConfigError, OSError, ValueError):
        return {}


SETTING_FIELDS = [name for name in ContamSettings.model_fields if name in settings.BY_NAME]


class ContamDB(dg.ConfigurableResource):
    """The DuckDB file; connections are taken under a cross-process lock (contam_assets.store)."""

    path: str = ""  # "" = <out_dir setting>/contam.duckdb

    def resolved(self) -> Path:
        if self.path:
            return Path(self.path).resolve()
        return out_folder(settings.env_value("out_dir")) / "contam.duckdb"

    @contextmanager
    def connect(self, read_only: bool = False):
        with store.connect(self.resolved(), read_only=read_only) as con:
            yield con


def evals_spec(settings: ContamSettings):
    """The task spec of the settings' decon reference folder (its records name their own tasks by eval_key)."""
    from contam_assets.sources.registry import decon_spec

    return decon_spec(str(settings.evals_path), name="decon_evals", description="decon reference folder")


def load_task_specs(settings: ContamSettings, refresh_lm_eval: bool = False):
    """The task specs the settings select (the registry, a decon reference folder, lm-eval tasks);
    a bad spec or unknown task fails the asset with its message.  lm-eval tasks are read through lm_eval when
    ``refresh_lm_eval`` (the task_registry asset) or when no earlier read of the same names is on disk."""
    from contam_assets.sources.registry import TaskSpecError, load_registry

    try:
        specs = load_registry(settings.tasks_path, settings.task_filter or None) if settings.uses_registry else []
        specs += [evals_spec(settings)] if settings.evals_path else []
        return specs + (lm_eval_specs(settings, refresh_lm_eval)[0] if settings.lm_eval_list else [])
    except (TaskSpecError, ConfigError) as exc:
        raise dg.Failure(str(exc)) from exc


def lm_eval_specs(settings: ContamSettings, refresh: bool = False):
    """(specs, leaf reports) of the settings' lm-eval tasks, rows under <out>/lm_eval/ (sources/lm_eval_tasks.py)."""
    from contam_assets.sources.lm_eval_tasks import LmEvalError, load_manifest, materialize

    folder = settings.out_path / "lm_eval"
    include = str(Path(settings.lm_eval_include).resolve()) if settings.lm_eval_include else None
    if not refresh:
        kept = load_manifest(folder, settings.lm_eval_list, include)
        if kept is not None:
            return kept
    try:
        return materialize(settings.lm_eval_list, folder, include, trust_code=settings.trust_task_code)
    except LmEvalError as exc:
        raise dg.Failure(str(exc)) from exc


def detect_config(settings: ContamSettings) -> DetectConfig:
    """The settings' detector configuration; a bad knob or decon config fails the asset with its message."""
    try:
        return settings.detect_config()[0]
    except (ConfigError, ValueError) as exc:
        raise dg.Failure(str(exc)) from exc


def automation_on() -> bool:
    """The automation setting: sensors and schedules start RUNNING when the code location loads."""
    return settings.automation_on()


def sensor_default_status() -> dg.DefaultSensorStatus:
    return dg.DefaultSensorStatus.RUNNING if automation_on() else dg.DefaultSensorStatus.STOPPED


def shared_resources(**settings_overrides) -> dict:
    settings = ContamSettings.from_env(**settings_overrides)
    return {"contam_settings": settings, "contam_db": ContamDB(path=str(settings.db_path))}


defs = dg.Definitions(resources=shared_resources())
