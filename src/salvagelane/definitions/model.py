"""The instruction definition, as loaded: enums and frozen dataclasses."""

from __future__ import annotations

import enum
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from salvagelane.core import AcceptRepairs, Framing, Guardrails, ItemSchema, SalvagePolicy
from salvagelane.core.records import DEFAULT_MAX_QUARANTINED
from salvagelane.core.schema_hint import report_hint_schema
from salvagelane.logs import redact_url
from salvagelane.vocabulary import NotifyOn

if TYPE_CHECKING:
    from salvagelane.definitions.prices import PriceTable
    from salvagelane.definitions.snapshot import DefinitionFiles

# --- The definition, as loaded -------------------------------------------------------------


class ConnectorKind(enum.StrEnum):
    """The wire format of a connector."""

    OPENAI = "openai"
    ANTHROPIC = "anthropic"
    REPLAY = "replay"


class SinkKind(enum.StrEnum):
    """Where a stored report is delivered."""

    JSON_FILE = "json_file"
    WEBHOOK = "webhook"
    CALLABLE = "callable"


class RetryOn(enum.StrEnum):
    """Outcomes of an attempt that may trigger another one."""

    NOTHING_SALVAGED = "nothing_salvaged"
    TRUNCATED = "truncated"
    PROVIDER_ERROR = "provider_error"
    OVERSIZE = "oversize"
    QUARANTINED = "quarantined"
    """Not a whole retry: a follow-up asking again for the rejected items only."""


@dataclass(frozen=True, kw_only=True, slots=True)
class Schedule:
    """When the scheduler runs the instruction."""

    cron: str
    timezone: str
    misfire_grace_seconds: int = 3600
    deadline_seconds: float | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class ConnectorSpec:
    """The LLM endpoint. ``api_key_env`` names the key's environment variable, and
    ``base_url_env`` (instead of ``base_url``) the base URL's; they are read only when a
    call is made."""

    kind: ConnectorKind
    model: str
    max_output_tokens: int
    temperature: float
    timeout_seconds: float
    structured_output: bool
    base_url: str | None = None
    base_url_env: str | None = None
    api_key_env: str | None = None
    max_tokens_field: str | None = None
    fixture: Path | None = None
    stream: bool = False
    anthropic_version: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class PromptTemplates:
    """The Jinja2 sources of the prompt."""

    system: str
    user: str


@dataclass(frozen=True, kw_only=True, slots=True)
class OutputSpec:
    """The report the model must return, with its schemas compiled."""

    envelope_schema_path: Path
    item_schema_path: Path
    items_path: tuple[str, ...]
    rank_key: str | None  # None: the first max_items are kept, in the model's order
    envelope_schema: ItemSchema
    item_schema: ItemSchema
    framing: Framing = Framing.AUTO

    @property
    def items_path_text(self) -> str:
        return ".".join(self.items_path)


@dataclass(frozen=True, kw_only=True, slots=True)
class AllowListSource:
    """One allow-list: a field and exactly one of inline values, a file or a context name.

    A file is named by ``reference`` (the path as written) and read through the
    definition's files; ``file`` is where that is on disk (None for a stored definition).
    """

    field: str
    values: tuple[str, ...] | None = None
    file: Path | None = None
    context: str | None = None
    reference: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class GuardrailSpec:
    """The guardrails of a definition; allow-lists are resolved per run."""

    max_items: int
    max_depth: int
    max_string_length: int
    max_output_bytes: int
    coerce: bool
    allow_lists: tuple[AllowListSource, ...] = ()
    accept_repairs: AcceptRepairs = AcceptRepairs.NONE
    max_quarantined: int = DEFAULT_MAX_QUARANTINED


@dataclass(frozen=True, kw_only=True, slots=True)
class ContextSource:
    """Where one context value comes from. A file is named by ``reference`` (the path as
    written) and read through the definition's files; ``file`` is where that is on disk
    (None for a stored definition)."""

    name: str
    kind: Literal["value", "file", "callable"]
    value: Any = None
    file: Path | None = None
    callable: str | None = None
    args: Mapping[str, Any] = field(default_factory=dict)
    reference: str | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class RetryPolicy:
    """How often, and after which outcomes, a run asks again."""

    attempts: int
    on: tuple[RetryOn, ...]
    length_budget_factor: float = 2.0
    max_output_tokens_ceiling: int | None = None
    # With QUARANTINED in ``on``: the quarantine reasons a follow-up asks again for.
    reask_reasons: tuple[str, ...] = ()

    @property
    def reasks(self) -> bool:
        return RetryOn.QUARANTINED in self.on


@dataclass(frozen=True, kw_only=True, slots=True)
class SinkSpec:
    """One report sink: a JSON file (``path``, may hold ``{run_id}`` and ``{instruction}``),
    a webhook (``url``, or ``url_env`` naming the URL's variable; optional ``token_env``
    naming the bearer token's) or a callable (``callable`` as ``module:function``)."""

    kind: SinkKind
    path: Path | None = None
    url: str | None = None
    url_env: str | None = None
    token_env: str | None = None
    timeout_seconds: float = 30.0
    callable: str | None = None

    @property
    def target(self) -> str:
        """Where the sink delivers, for logs and the runs table (never a secret: a URL
        without userinfo and query string, or the name of the URL's variable)."""
        if self.url_env is not None:
            return f"${self.url_env}"
        if self.url is not None:
            return redact_url(self.url)
        return str(self.path or self.callable)


@dataclass(frozen=True, kw_only=True, slots=True)
class EmailSpec:
    """Where an email notification goes and how it is sent (SMTP; STARTTLS unless
    ``starttls`` is false); the credentials are named by their variables, never held."""

    to: tuple[str, ...]
    sender: str
    smtp_host: str
    smtp_port: int = 587
    starttls: bool = True
    username_env: str | None = None
    password_env: str | None = None
    timeout_seconds: float = 30.0

    @property
    def target(self) -> str:
        return f"{', '.join(self.to)} via {self.smtp_host}:{self.smtp_port}"


@dataclass(frozen=True, kw_only=True, slots=True)
class NotifySpec:
    """One notification of a definition: the events it is sent on, and its one target,
    a webhook (a SinkSpec of kind webhook) or an email."""

    on: tuple[NotifyOn, ...]
    webhook: SinkSpec | None = None
    email: EmailSpec | None = None


@dataclass(frozen=True, kw_only=True, slots=True)
class Budget:
    """What an instruction may spend in one day (the calendar day of a run's fire time,
    or of its start for an unscheduled run, in the schedule's time zone): prompt plus
    completion tokens, and cost by ``prices``. None: no limit. ``prices`` is the price
    table that applies (named by ``budget.prices``, or the directory's default), None
    when there is none."""

    tokens_per_day: int | None = None
    cost_per_day: float | None = None
    prices: PriceTable | None = None

    @property
    def limited(self) -> bool:
        return self.tokens_per_day is not None or self.cost_per_day is not None


@dataclass(frozen=True, kw_only=True, slots=True)
class Instruction:
    """A validated instruction definition.

    ``definition`` is the document as written; ``definition_sha256`` is the SHA-256
    of its canonical JSON (sorted keys, no whitespace), which identifies the version
    a run used. Comments and layout do not change it; referenced files are hashed
    separately (``output.item_schema.sha256``).

    ``text`` is the YAML as written, ``files`` where the files it names are read (on
    disk next to it, or from a stored copy) and ``loaded_files`` the text of those read
    while loading it (its schemas). ``stored_sha256`` is the version of the stored copy
    it was rebuilt from (:func:`~salvagelane.definitions.loading.load_stored`), None
    for a definition loaded from the operator's directory.
    """

    id: str
    description: str
    schedule: Schedule
    connector: ConnectorSpec
    prompt: PromptTemplates
    output: OutputSpec
    guardrails: GuardrailSpec
    context: Mapping[str, ContextSource]
    retry: RetryPolicy
    source: Path
    definition: Mapping[str, Any]
    definition_sha256: str
    sinks: tuple[SinkSpec, ...] = ()
    notify: tuple[NotifySpec, ...] = ()
    text: str = ""
    files: DefinitionFiles | None = None
    loaded_files: Mapping[str, str] = field(default_factory=dict)
    stored_sha256: str | None = None
    budget: Budget = field(default_factory=Budget)

    def response_schema(self) -> dict[str, Any]:
        """The report's schema as a structured-output hint sends it: every ``$ref``
        bundled, the items capped at ``max_items``. Raises SchemaError when a reference
        cannot be bundled (loading refuses such a definition with ``structured_output``)."""
        output = self.output
        return report_hint_schema(
            output.envelope_schema.schema,
            resources=[output.item_schema.schema],
            items_path=output.items_path,
            max_items=self.guardrails.max_items,
        )

    def salvage_policy(self, allow_lists: Mapping[str, frozenset[str]]) -> SalvagePolicy:
        """The core's policy for this instruction, with allow-lists from
        :func:`resolve_allow_lists`."""
        limits = self.guardrails
        return SalvagePolicy(
            items_path=self.output.items_path,
            item_schema=self.output.item_schema,
            envelope_schema=self.output.envelope_schema,
            framing=self.output.framing,
            guardrails=Guardrails(
                max_bytes=limits.max_output_bytes,
                max_depth=limits.max_depth,
                max_string_length=limits.max_string_length,
                max_items=limits.max_items,
                rank_key=self.output.rank_key,
                allow_lists=dict(allow_lists),
                coerce=limits.coerce,
                accept_repairs=limits.accept_repairs,
                max_quarantined=limits.max_quarantined,
            ),
        )


@dataclass(frozen=True, kw_only=True, slots=True)
class RenderedPrompt:
    """The prompt as sent: the system prompt ends with the output contract."""

    system: str
    user: str
