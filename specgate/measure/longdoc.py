"""Long-document workloads: prompts for long-context tasks built from JSONL corpora, in English and Chinese.

Tasks, one instruction template per task and language (`TEMPLATES`); the document comes first, the instruction last:

    continue    continue a contract from where its text stops          (e.g. CUAD contracts)
    summarize   summarize a report; a corpus `summary` is the reference (e.g. CRS reports)
    notice      draft a government notice based on a law                (e.g. 招标投标法, 政府采购法)

`build_long_workload` fits each prompt to a context length: prompt tokens ≤ min(target, window − max_new_tokens),
the prompt being the chat template, the document and the instruction. Tokens are counted with the target model's
tokenizer when one is given (exactly as the engine sees them, chat template included); otherwise they are estimated
from characters (`CHARS_PER_TOKEN`: 3.5 characters per token in English, 0.5 in Chinese, plus 48 tokens for a chat
template). The ratios were measured on SmolLM2's tokenizer (≈ 4.2 and ≈ 0.55) and rounded towards more tokens, so
an estimate cuts too much rather than overflowing the window; tokenizers with a large Chinese vocabulary (Qwen:
≈ 1.4 characters per token) fit far more text, so pass the tokenizer for them. A document is cut at its last
paragraph or sentence end within the budget. One shorter than the budget is followed by the next documents of the
corpus, each under its title; a document repeats only when the whole corpus is used, and the record says so.

The output is an ordinary workload JSONL file (`id`, `prompt`, `reference`) whose extra keys the loader ignores:
`task`, `language`, `context_target`, `context_tokens` (the prompt's tokens), `document_tokens` (kept),
`truncated_from` (tokens before the cut, null when nothing was cut), `sources`, `repeated`, `token_count`.

Declare such a workload with `long: true` in `specgate.yaml`: the long-context checks run on those workloads only.
"""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from specgate.errors import WorkloadError

PROMPT_TASKS = ("continue", "summarize", "notice")
LANGUAGES = ("en", "zh")
CHARS_PER_TOKEN = {"en": 3.5, "zh": 0.5}
TEMPLATE_TOKENS = 48
_BOUNDARIES = ("\n", "。", "；", "！", "？", ". ", "; ", "! ", "? ")
_KEEP_AT_LEAST = 0.9  # cut back to a sentence end only when that keeps 90 % of what fits

TEMPLATES = {
    ("continue", "en"): "<contract>\n{document}\n</contract>\n\nThe contract above stops part-way through. Continue it "
    "from exactly where it stops, keeping its numbering, defined terms and style. Write only the continuation.",
    ("continue", "zh"): "【合同】\n{document}\n【合同文本到此中断】\n\n上面的合同在中途中断。"
    "请从中断处继续起草，保持条款编号、定义用语和行文风格一致。只输出续写的内容。",
    ("summarize", "en"): "<report>\n{document}\n</report>\n\nSummarize the report above for a decision-maker in about "
    "200 words: its purpose, its main findings, and the recommendations or open issues it raises.",
    ("summarize", "zh"): "【报告】\n{document}\n【报告结束】\n\n请为决策者用约300字概括上面的报告：说明报告的目的、"
    "主要结论，以及提出的建议或有待解决的问题。",
    ("notice", "en"): "<law>\n{document}\n</law>\n\nBased on the law above, draft an official government notice to the "
    "public bodies and suppliers it concerns: the legal basis, what they must do and from when, and whom to contact. "
    "Use a formal format: a title, numbered points and a closing.",
    ("notice", "zh"): "【法律法规】\n{document}\n【法律法规结束】\n\n"
    "请根据上面的法律法规，起草一份面向有关单位的政府通知：写明法律依据、有关单位须落实的要求及执行时间、联系方式。采用正式公文格式，包括标题、主送机关、分条列明的正文和落款。",
}


@dataclass(frozen=True, slots=True)
class Document:
    """One corpus document. `kind` (contract, report, law; a corpus `kind` or `category`) and `reference` (its
    reference summary) are there when the corpus has them."""

    id: str
    title: str
    text: str
    language: str | None = None
    kind: str | None = None
    reference: str | None = None


@dataclass(frozen=True, slots=True)
class LongPrompt:
    """One built prompt, as written to the workload file (see the module docstring for the fields)."""

    id: str
    prompt: str
    task: str
    language: str
    context_target: int
    context_tokens: int
    document_tokens: int
    truncated_from: int | None
    sources: tuple[str, ...]
    repeated: bool
    token_count: str
    reference: str | None = None


def _document(record: dict[str, Any], number: int) -> Document:
    text = record.get("text")
    if not isinstance(text, str) or not text.strip():
        raise ValueError(f"no document text in field 'text' (fields present: {', '.join(record)})")
    name = record.get("id") or record.get("title") or record.get("name") or f"line-{number}"
    title = record.get("title") or record.get("name") or name
    summary = record.get("summary")
    language, kind = record.get("language"), record.get("kind") or record.get("category")
    return Document(
        id=str(name),
        title=str(title),
        text=text,
        language=None if language is None else str(language),
        kind=None if kind is None else str(kind),
        reference=None if summary is None else str(summary),
    )


def load_corpus(path: Path, language: str | None = None) -> tuple[Document, ...]:
    """JSONL documents with a `text` field; `id` from id, title, name or the line; reference from `summary`.

    With `language`, documents whose `language` field names another language are left out.
    """
    try:
        lines = path.read_text(encoding="utf-8").splitlines()
    except OSError as exc:
        raise WorkloadError(f"corpus {path}: cannot read: {exc.strerror}") from exc
    documents = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            document = _document(json.loads(line), number)
        except (ValueError, AttributeError) as exc:
            raise WorkloadError(f"corpus {path}:{number}: {exc}. Each line must be a JSON object with 'text'.") from exc
        if language is None or document.language in (None, language):
            documents.append(document)
    if not documents:
        raise WorkloadError(f"corpus {path} holds no documents" + (f" in language {language!r}" if language else ""))
    return tuple(documents)


class TokenCounter(Protocol):
    """Counts tokens the way the target model will see them."""

    label: str

    def count(self, text: str) -> int: ...

    def head(self, text: str, tokens: int) -> str: ...

    def prompt_tokens(self, prompt: str) -> int: ...


class CharEstimate:
    """Tokens estimated from characters, plus a fixed allowance for the chat template."""

    def __init__(self, chars_per_token: float, template_tokens: int = TEMPLATE_TOKENS) -> None:
        self.chars_per_token = chars_per_token
        self.template_tokens = template_tokens
        self.label = f"estimate: {chars_per_token:g} chars/token + {template_tokens} chat-template tokens"

    def count(self, text: str) -> int:
        return math.ceil(len(text) / self.chars_per_token)

    def head(self, text: str, tokens: int) -> str:
        return text[: int(tokens * self.chars_per_token)]

    def prompt_tokens(self, prompt: str) -> int:
        return self.count(prompt) + self.template_tokens


class TokenizerCount:
    """Exact counts with a Hugging Face tokenizer; prompts through its chat template when it has one."""

    def __init__(self, tokenizer: Any) -> None:
        self.tokenizer = tokenizer
        name = Path(str(getattr(tokenizer, "name_or_path", "") or "")).name
        self.label = f"tokenizer {name or type(tokenizer).__name__}"

    def _ids(self, text: str) -> list[int]:
        return list(self.tokenizer(text, add_special_tokens=False)["input_ids"])

    def count(self, text: str) -> int:
        return len(self._ids(text))

    def head(self, text: str, tokens: int) -> str:
        return str(self.tokenizer.decode(self._ids(text)[:tokens]))

    def prompt_tokens(self, prompt: str) -> int:
        if getattr(self.tokenizer, "chat_template", None):
            messages = [{"role": "user", "content": prompt}]
            encoded = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True, return_dict=True)
            return len(encoded["input_ids"])
        return len(self.tokenizer(prompt)["input_ids"])


def _gather(
    documents: Sequence[Document], start: int, tokens: int, counter: TokenCounter
) -> tuple[str, tuple[str, ...], bool]:
    """Text of at least `tokens` tokens: documents[start], then the next ones, each under its title."""
    parts: list[str] = []
    sources: list[str] = []
    total = 0
    while total < tokens and len(parts) < 4 * len(documents):
        document = documents[(start + len(parts)) % len(documents)]
        part = document.text.strip() if not parts else f"{document.title}\n\n{document.text.strip()}"
        parts.append(part)
        sources.append(document.id)
        total += counter.count(part)
    return "\n\n".join(parts), tuple(sources), len(parts) > len(documents)


def cut_at_boundary(text: str) -> str:
    """`text` up to its last line or sentence end, when that keeps at least 90 % of it; else `text` unchanged."""
    floor = int(len(text) * _KEEP_AT_LEAST)
    ends = [i + len(b) for b in _BOUNDARIES if (i := text.rfind(b, floor)) >= 0]
    return text[: max(ends)].rstrip() if ends else text


def _fit(text: str, template: str, budget: int, counter: TokenCounter) -> tuple[str, int, int | None]:
    """(kept text, its tokens, tokens before the cut or None) so that the rendered prompt has ≤ `budget` tokens."""
    original = counter.count(text)
    room = budget - counter.prompt_tokens(template.format(document=""))
    if room <= 0:
        raise WorkloadError(f"context budget {budget} tokens leaves no room for a document after the instruction")
    if original <= room and counter.prompt_tokens(template.format(document=text)) <= budget:
        return text, original, None
    kept = text
    for _ in range(8):  # decoding and re-encoding a cut may shift a few tokens: shrink until it fits
        kept = cut_at_boundary(counter.head(text, room))
        over = counter.prompt_tokens(template.format(document=kept)) - budget
        if over <= 0:
            return kept, counter.count(kept), original
        room -= max(over, 8)
    raise WorkloadError(f"could not fit the document into {budget} tokens")


def build_prompt(
    documents: Sequence[Document],
    start: int,
    task: str,
    language: str,
    target: int,
    budget: int,
    counter: TokenCounter,
    fill: bool = True,
) -> LongPrompt:
    """One prompt of ≤ `budget` tokens from documents[start] (and the next ones when `fill`)."""
    template = TEMPLATES[(task, language)]
    first = documents[start % len(documents)]
    if fill:
        text, sources, repeated = _gather(documents, start, budget, counter)
    else:
        text, sources, repeated = first.text.strip(), (first.id,), False
    kept, kept_tokens, original = _fit(text, template, budget, counter)
    prompt = template.format(document=kept)
    return LongPrompt(
        id=f"{task}-{language}-{target}-{start}",
        prompt=prompt,
        task=task,
        language=language,
        context_target=target,
        context_tokens=counter.prompt_tokens(prompt),
        document_tokens=kept_tokens,
        truncated_from=original,
        sources=sources,
        repeated=repeated,
        token_count=counter.label,
        reference=first.reference if task == "summarize" and len(sources) == 1 else None,
    )


def _window(tokenizer: Any, context_window: int | None, targets: Sequence[int]) -> int:
    if context_window is not None:
        return context_window
    limit = getattr(tokenizer, "model_max_length", None)
    return int(limit) if isinstance(limit, int) and 0 < limit < 10_000_000 else max(targets)


def build_long_workload(
    corpus: Path | str | Sequence[Document],
    task: str,
    language: str,
    context_tokens: Sequence[int],
    out_path: Path | str,
    tokenizer: Any = None,
    limit: int = 1,
    *,
    max_new_tokens: int = 64,
    context_window: int | None = None,
    fill: bool = True,
) -> list[LongPrompt]:
    """Build `limit` prompts per context length from a corpus, write them as workload JSONL, and return them.

    `context_window` defaults to the tokenizer's `model_max_length` (when it is a real limit), else the largest
    target. Each prompt has ≤ min(target, context_window − max_new_tokens) tokens. Prompt k starts from document k
    (of the corpus, in order), so with as many documents as prompts no prompt is a prefix of another and a prefix
    cache cannot shorten a TTFT. Pass a filtered list of `Document`s to use only some (e.g. one `kind`).
    """
    if (task, language) not in TEMPLATES:
        raise WorkloadError(f"task {task!r} / language {language!r}: known tasks {PROMPT_TASKS}, languages {LANGUAGES}")
    if not context_tokens or limit < 1:
        raise WorkloadError(f"need context lengths and limit ≥ 1, got {list(context_tokens)} and {limit}")
    documents = load_corpus(Path(corpus), language) if isinstance(corpus, (str, Path)) else tuple(corpus)
    counter: TokenCounter = CharEstimate(CHARS_PER_TOKEN[language]) if tokenizer is None else TokenizerCount(tokenizer)
    window = _window(tokenizer, context_window, context_tokens)
    prompts = []
    for position, target in enumerate(sorted(set(context_tokens))):
        budget = min(target, window - max_new_tokens)
        for index in range(limit):
            start = position * limit + index
            prompts.append(build_prompt(documents, start, task, language, target, budget, counter, fill))
    write_long_workload(prompts, Path(out_path))
    return prompts


def write_long_workload(prompts: Sequence[LongPrompt], path: Path) -> None:
    """Write prompts as workload JSONL (UTF-8, Chinese kept readable)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    lines = [json.dumps(asdict(p), ensure_ascii=False) for p in prompts]
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")


def load_context_targets(path: Path) -> dict[str, int]:
    """`id → context_target` of a built long workload file (prompts without the key are left out)."""
    targets = {}
    for line in path.read_text(encoding="utf-8").splitlines():
        if line.strip():
            record = json.loads(line)
            if isinstance(record, dict) and isinstance(record.get("context_target"), int):
                targets[str(record.get("id"))] = int(record["context_target"])
    return targets
