"""Command line: `python -m app` opens the window; `bench ...` runs the benchmark; `serve ...` the API."""

from __future__ import annotations

import argparse
import asyncio
import json
import math
import os
import sys
from dataclasses import replace

from .engine.config_fields import CONFIG_FIELDS, FIELDS
from .engine.errors import ModelLoadError
from .engine.params import MMPROJ_NONE, EngineConfig, Policy, ServingMode, SpecType
from .engine.sampling.params import SAMPLING_FIELDS

EXIT_BAD_INPUT = 2
API_KEY_ENV = "BATCH_PLAYGROUND_API_KEY"


def _int_list(text: str) -> list[int]:
    try:
        values = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected numbers separated by commas, got {text!r}") from None
    if not values or min(values) < 1:
        raise argparse.ArgumentTypeError("parallel counts must be 1 or more")
    return values


def _positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError("must be 1 or more")
    return value


def _positive_float(text: str) -> float:
    value = float(text)
    if not value > 0:
        raise argparse.ArgumentTypeError("must be more than 0")
    return value


def _budget(text: str) -> int:
    value = int(text)
    if value < -1:
        raise argparse.ArgumentTypeError("must be -1 (no limit), 0 or more")
    return value


def _json_object(text: str) -> dict:
    try:
        value = json.loads(text)
    except ValueError as e:
        raise argparse.ArgumentTypeError(f"not JSON: {e}") from None
    if not isinstance(value, dict):
        raise argparse.ArgumentTypeError('expected a JSON object such as {"enable_thinking": false}')
    return value


def _origin(text: str) -> str:
    """A browser origin as its Origin header says it: scheme://host[:port], no path; or * for any."""
    scheme, sep, rest = text.strip().partition("://")
    if text.strip() != "*" and (not sep or not scheme or not rest or "/" in rest.rstrip("/")):
        raise argparse.ArgumentTypeError(f"expected an origin such as http://example.com:3000, or *; got {text!r}")
    return text.strip()


def _host_name(text: str) -> str:
    """A name the server is reached by, as a Host header gives it without the port; or * for any."""
    name = text.strip()
    if not name or any(c in name for c in "/:@[] \t"):
        raise argparse.ArgumentTypeError(f"expected a host name such as myserver.lan (no scheme, no port), or *; got {text!r}")
    return name


def _sampling(text: str) -> tuple[str, object]:
    """NAME=VALUE: a sampling knob by its request field's name (llama-server's), the value as JSON
    (a bare word is a text), checked against the knob's range."""
    name, sep, value = text.partition("=")
    knob = next((f for f in SAMPLING_FIELDS if name.strip() in f.api), None)
    if not sep or knob is None:
        names = ", ".join(f.api[0] for f in SAMPLING_FIELDS if f.api)
        raise argparse.ArgumentTypeError(f"expected NAME=VALUE with NAME one of {names}; got {text!r}")
    try:
        raw = json.loads(value)
    except ValueError:
        raw = value
    try:
        return knob.name, knob.from_json(raw, name.strip())
    except ValueError as e:
        raise argparse.ArgumentTypeError(str(e)) from None


def _not_negative(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError("must be 0 or more")
    return value


def _argument(parse):
    """A setting's text parser as an argparse type: its reason becomes the error message."""

    def argument(text: str):
        try:
            return parse(text)
        except ValueError as e:
            raise argparse.ArgumentTypeError(str(e)) from None

    return argument


def _add_engine_flags(parser: argparse.ArgumentParser, ctx_help: str | None = None) -> None:
    """The engine flags (config_fields.py), set only when given (argparse.SUPPRESS): the window keeps
    its saved settings for the rest, and a flag before a subcommand is not undone by it."""
    group = parser.add_argument_group("engine settings (llama.cpp's flag names and meanings where it has them)")
    for field in CONFIG_FIELDS:
        if not field.flags:
            continue
        help_ = ctx_help if ctx_help and field.name == "n_ctx" else field.described()
        common = {"dest": field.name, "default": argparse.SUPPRESS, "help": help_}
        if field.switch is not None:
            group.add_argument(*field.flags, action="store_const", const=field.switch, **common)
        elif field.text.choices:
            group.add_argument(*field.flags, choices=field.text.choices, **common)  # a word: engine_overrides parses it
        else:
            long_flag = next(flag for flag in field.flags if flag.startswith("--"))
            metavar = field.metavar or long_flag[2:].upper().replace("-", "_")  # argparse's own default
            group.add_argument(*field.flags, type=_argument(field.text.parse), metavar=metavar, **common)


def _add_setting(parser: argparse.ArgumentParser, name: str, flag: str, default, help_: str | None = None, shown=None) -> None:
    """A command's own option for an engine setting (config_fields.py: its help, its words or its
    parser), with the command's default, said in --help (`shown`, where the default is None)."""
    field = FIELDS[name]
    help_ = f"{help_ or field.help} (default: {field.text.format(default) if shown is None else shown})"
    if field.text.choices:
        parser.add_argument(flag, choices=field.text.choices, default=field.text.format(default), help=help_)
    else:
        parser.add_argument(flag, type=_argument(field.text.parse), default=default, help=help_)


def engine_overrides(args: argparse.Namespace) -> dict:
    """The EngineConfig fields the command line set, in EngineConfig's types."""
    changes = {}
    for field in CONFIG_FIELDS:
        if field.flags and field.name in vars(args):  # bench's own --mode, --policy share a name
            value = getattr(args, field.name)
            changes[field.name] = field.text.parse(value) if isinstance(value, str) else value
    if changes.get("spec_draft_model") and "spec_type" not in changes:  # -md alone: draft with it (llama.cpp: nothing)
        changes["spec_type"] = SpecType.DRAFT
    problem = EngineConfig(model_path="", **changes).problem()
    if problem:
        raise ValueError(problem)
    return changes


def build_parser() -> argparse.ArgumentParser:
    # flags are whole words, as llama.cpp's: an abbreviation would be taken for another flag (a
    # subcommand's --mode read as a prefix of --model / --model-draft)
    parser = argparse.ArgumentParser(prog="batch-playground", description=__doc__, allow_abbrev=False)
    parser.add_argument(
        "--model", action="append", dest="models", metavar="PATH",
        help="GGUF model file (default: the bundled SmolLM2-135M-Instruct); again to load several, the first the default",
    )  # fmt: skip
    _add_hf_flag(parser, "hf")
    parser.add_argument("--panes", type=_positive, help="number of chat panes to open")
    parser.add_argument("--prompt", help="broadcast this message to every pane at start")
    parser.add_argument("--screenshot", metavar="PNG", help="save a picture of the window when done")
    parser.add_argument("--exit-when-done", action="store_true", help="quit once every pane has finished")
    parser.add_argument(
        "--show-batching", action="store_true",
        help="broadcast --prompt (or a question) three times: sequential, static, continuous; the timelines side by side",
    )  # fmt: skip
    _add_engine_flags(parser)
    sub = parser.add_subparsers(dest="command")
    bench = sub.add_parser("bench", allow_abbrev=False, help="headless benchmark (the batching guide's table)")
    bench.add_argument(
        "--model", action="append", dest="bench_models", metavar="PATH",
        help="GGUF model file; again for several at once, each with --parallel conversations",
    )  # fmt: skip
    _add_hf_flag(bench, "bench_hf")
    _add_setting(bench, "capacity", "--parallel", None, "parallel conversations of one run", shown=1)
    bench.add_argument("--sweep", type=_int_list, help="several runs, e.g. 1,2,4,8,16")
    _add_setting(bench, "mode", "--mode", ServingMode.BATCHED)
    bench.add_argument("--max-tokens", type=_positive, default=128)
    bench.add_argument("--ignore-eos", action="store_true", help="generate exactly --max-tokens tokens")
    bench.add_argument("--system", help="system prompt for every conversation (@FILE reads a file)")
    bench.add_argument("--temperature", type=float, default=0.0)
    bench.add_argument("--seed", type=int, default=42)
    _add_engine_flags(bench, "KV cells (default: enough for every conversation; 0: sized as the window sizes it)")
    _add_setting(bench, "n_batch", "--batch", EngineConfig.n_batch)
    bench.add_argument("--turns", type=_positive, default=1, help="user turns per conversation")
    bench.add_argument("--prompts", metavar="FILE", help='JSON lines: {"system": ..., "turns": [...]}')
    _add_setting(bench, "policy", "--policy", EngineConfig.policy)
    bench.add_argument("--adaptive", action="store_true", help="adapt the batch size to --itl-target-ms")
    bench.add_argument(
        "--itl-target-ms", type=_positive_float, default=150.0, help="inter-token latency target (with --adaptive)"
    )
    bench.add_argument("--probs", type=_not_negative, metavar="N", help="every token tells its probability and N rivals'")
    bench.add_argument(
        "--sampling", type=_sampling, action="append", default=[], metavar="NAME=VALUE",
        help="a sampling knob by its API name, the value as JSON (again for more): --sampling dry_multiplier=0.8",
    )  # fmt: skip
    bench.add_argument("--guide", action="store_true", help="the guide's table: 1; 4 static; 4 without, 4, 8, 16 with KV reuse")
    bench.add_argument("--json", metavar="PATH", help="write every run's figures here")
    bench.add_argument("--trace", metavar="FILE.json", help="write every run's steps and requests as a Chrome trace (Perfetto)")
    bench.add_argument("-v", "--verbose", action="store_true", help="a perf line per request")
    _add_serve_parser(sub)
    _add_models_parser(sub)
    return parser


def _add_hf_flag(parser: argparse.ArgumentParser, dest: str) -> None:
    parser.add_argument(
        "--hf", action="append", dest=dest, default=[], metavar="USER/REPO[:QUANT]",
        help="a GGUF model from Hugging Face, downloaded into its cache first (llama.cpp's -hf); after any --model",
    )  # fmt: skip


def _add_models_parser(sub) -> None:
    models = sub.add_parser("models", allow_abbrev=False, help="GGUF models from Hugging Face: search, pull")
    verbs = models.add_subparsers(dest="models_command", required=True)
    search = verbs.add_parser("search", help="GGUF repos whose name matches TEXT, the most downloaded first")
    search.add_argument("text", metavar="TEXT")
    search.add_argument("--limit", type=_positive, default=20)
    files = verbs.add_parser("files", help="a repo's GGUF models: quant, size, file")
    files.add_argument("repo", metavar="USER/REPO")
    pull = verbs.add_parser("pull", help="download USER/REPO[:QUANT] into the Hugging Face cache; prints its path")
    pull.add_argument("spec", metavar="USER/REPO[:QUANT]")
    pull.add_argument(
        "--mmproj", choices=("auto", "none"), default="auto",
        help="auto: the repo's vision projector for it too, where it has one; none: the model alone (llama.cpp's --no-mmproj)",
    )  # fmt: skip


def _add_serve_parser(sub) -> None:
    serve = sub.add_parser("serve", allow_abbrev=False, help="serve the engine over the OpenAI-compatible HTTP API")
    serve.add_argument(
        "--model", action="append", dest="serve_models", metavar="PATH",
        help="GGUF model file; again to serve several, the first the default",
    )  # fmt: skip
    _add_hf_flag(serve, "serve_hf")
    serve.add_argument("--host", default="127.0.0.1", help="address to listen on (default: loopback only)")
    serve.add_argument("--port", type=int, default=8080)
    serve.add_argument("--api-key", default=os.environ.get(API_KEY_ENV), help=f"require this key (default: ${API_KEY_ENV})")
    serve.add_argument(
        "--allow-origin", action="append", dest="allow_origins", default=[], type=_origin, metavar="ORIGIN",
        help="a web page's origin that may call the server, e.g. http://example.com:3000 (again for more; * for any); "
        "pages from this machine always may, others get 403",
    )  # fmt: skip
    serve.add_argument(
        "--allow-host", action="append", dest="allow_hosts", default=[], type=_host_name, metavar="NAME",
        help="a name the server may be reached by (the Host a request names), e.g. myserver.lan (again for more; * for any), "
        "beside loopback names and, beyond loopback without --api-key, IP addresses and this machine's own names; "
        "others get 403 (DNS rebinding)",
    )  # fmt: skip
    serve.add_argument(
        "--alias", action="append", dest="aliases", default=[],
        help="the name clients see for a model, once per --model in order (default: its file name without .gguf)",
    )  # fmt: skip
    _add_setting(serve, "capacity", "--parallel", EngineConfig.capacity, "sequences decoded together")
    _add_setting(serve, "n_batch", "--batch", EngineConfig.n_batch)
    _add_engine_flags(serve)
    serve.add_argument(
        "--max-queue",
        type=_positive,
        help="requests in flight at once, running and waiting; more get 503 (default: 4 x --parallel)",
    )
    serve.add_argument(
        "--reasoning-format", choices=("deepseek", "auto", "none"), default="deepseek",
        help="a thinking model's thoughts: apart, in reasoning_content (deepseek, auto), or left in the content "
        "as written (none); a request's reasoning_format overrides it (default: deepseek)",
    )  # fmt: skip
    serve.add_argument(
        "--reasoning-budget", type=_budget, default=-1, metavar="N",
        help="tokens a reply may think before its family's closing marker is put in and it answers: -1 no limit, "
        "0 no thinking; a request's reasoning_budget_tokens overrides it (default: -1)",
    )  # fmt: skip
    serve.add_argument(
        "--chat-template-kwargs", type=_json_object, default={}, metavar="JSON",
        help='more variables for every chat template, e.g. \'{"enable_thinking": false}\'; a request\'s '
        "chat_template_kwargs go over them",
    )  # fmt: skip
    serve.add_argument(
        "--allow-image-urls", action="store_true",
        help="fetch pictures a request sends by http(s) URL (up to 20 MiB, 10 s each); without it only data: URIs "
        "are read (a URL would let a client make the server fetch from its network)",
    )  # fmt: skip
    serve.add_argument(
        "--responses-store-mb", type=_positive, metavar="MIB",
        help="memory for the Responses API's stored responses and their conversations; beyond it the least "
        "recently used is dropped (default: 256)",
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    if args.command == "models":
        return _models(args)
    try:
        _resolve_hf(args)
    except ValueError as e:  # the hub's HubError too (below)
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    args.model = args.models[0] if args.models else None  # the window's model; args.models has them all
    try:
        args.engine_overrides = engine_overrides(args)
        if args.command == "bench":
            return _bench(args)
        if args.command == "serve":
            return _serve(args)
        from .ui.main import run_app  # Qt is loaded only for the window

        return run_app(args)
    except (ModelLoadError, FileNotFoundError, ValueError) as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT


def _resolve_hf(args) -> None:
    """--hf models downloaded (or found in the cache) and added after --model's, before the engine
    starts, each with its repo's vision projector, as llama.cpp's -hf: not with --mmproj none, nor for
    the first model when --mmproj names its projector (the others find theirs beside them)."""
    mmproj = getattr(args, "mmproj", None)  # None: auto (or not given); MMPROJ_NONE; or a file
    for hf, models in (("hf", "models"), ("bench_hf", "bench_models"), ("serve_hf", "serve_models")):
        specs = getattr(args, hf, None)
        if specs:
            before = getattr(args, models) or []
            paths = []
            for i, spec in enumerate(specs):
                first = not before and i == 0
                paths.append(_pull(spec, mmproj is None or (mmproj != MMPROJ_NONE and not first)))
            setattr(args, models, before + paths)


def _pull(spec: str, projector: bool = True) -> str:
    from .models.hub import HubError, pull

    try:
        return pull(spec, progress=_to_stderr, projector=projector)
    except HubError as e:
        raise ValueError(str(e)) from None


def _to_stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _models(args) -> int:
    """`models search TEXT`, `models files USER/REPO`, `models pull USER/REPO[:QUANT]`."""
    from .models import hub

    try:
        if args.models_command == "search":
            hits = hub.search(args.text, args.limit)
            rows = [
                (h.repo_id, f"{h.downloads:,}", f"{h.likes:,}", f"{h.last_modified:%Y-%m-%d}" if h.last_modified else "-")
                for h in hits
            ]
            _print_table(("repo", "downloads", "likes", "modified"), rows)
            if not hits:
                print(f"no GGUF repo matches {args.text!r}", file=sys.stderr)
        elif args.models_command == "files":
            models = hub.list_models(hub.parse_spec(args.repo)[0])
            rows = [
                (m.quant or "-", _mib(m.size), f"{m.name}" + (f" (+{len(m.files) - 1} parts)" if len(m.files) > 1 else ""))
                for m in models
            ]
            _print_table(("quant", "MiB", "file"), rows)
        else:
            print(hub.pull(args.spec, progress=_to_stderr, projector=args.mmproj == "auto"))
    except hub.HubError as e:
        print(f"error: {e}", file=sys.stderr)
        return EXIT_BAD_INPUT
    except KeyboardInterrupt:
        print("error: interrupted; run the same command again", file=sys.stderr)
        return EXIT_BAD_INPUT
    return 0


def _mib(size: int | None) -> str:
    return "?" if size is None else f"{size / 2**20:,.1f}"


def _print_table(header: tuple[str, ...], rows: list[tuple[str, ...]]) -> None:
    widths = [max(len(str(cell)) for cell in column) for column in zip(header, *rows)]
    for row in (header, *rows):
        print("  ".join(str(cell).ljust(width) for cell, width in zip(row, widths)).rstrip())


def _bench(args) -> int:
    from .bench import BenchSettings, format_table, guide_rows, load_prompts, run_bench
    from .default_model import default_model_path
    from .engine.model_file import check_gguf_file
    from .engine.trace import write_trace

    model, *others = args.bench_models or [default_model_path()]
    for path in (model, *others):
        check_gguf_file(path)
    system = args.system
    if system and system.startswith("@"):
        with open(system[1:], encoding="utf-8") as f:
            system = f.read().strip()
    prompts = load_prompts(args.prompts) if args.prompts else None
    base = BenchSettings(
        model_path=model,
        other_models=tuple(others),
        mode=ServingMode(args.mode),
        kv_reuse=args.engine_overrides.get("kv_reuse", True),
        max_tokens=args.max_tokens,
        ignore_eos=args.ignore_eos,
        temperature=args.temperature,
        seed=args.seed,
        turns=args.turns,
        system=system,
        n_threads=args.engine_overrides.get("n_threads"),
        n_ctx=args.engine_overrides.get("n_ctx"),
        n_batch=args.batch,
        prompts=prompts,
        policy=Policy(args.policy),
        itl_target_ms=args.itl_target_ms if args.adaptive else None,
        n_probs=args.probs,
        sampling=tuple(args.sampling),
        engine_settings=tuple((k, v) for k, v in args.engine_overrides.items() if k not in ("n_ctx", "n_threads", "kv_reuse")),
    )
    if args.guide:
        rows = guide_rows(base)
    else:
        rows = [replace(base, parallel=p) for p in args.sweep or [args.parallel or 1]]
    runs = []
    trace: list[dict] | None = [] if args.trace else None
    for settings in rows:
        print(f"# {settings.label}, {settings.parallel} parallel ...", file=sys.stderr, flush=True)
        run = asyncio.run(run_bench(settings, trace=trace))
        if args.verbose:
            _print_perf_lines(run)
        runs.append(run)
    print(format_table(runs))
    for run in runs:
        _print_models(run)
        _print_turns(run)
        for note in run["notes"]:
            print(f"note: {note}")
    if args.json:
        with open(args.json, "w", encoding="utf-8") as f:
            json.dump({"runs": _without_nan(runs)}, f, indent=1)
    if args.trace:
        write_trace(args.trace, trace)
    return 0


def _print_models(run: dict) -> None:
    """Each model's own speed, when a run had several."""
    if len(run["by_model"]) > 1:
        figures = ", ".join(f"{name} {m['agg_tok_s']:.1f} tok/s" for name, m in run["by_model"].items())
        print(f"{run['configuration']}, {run['parallel']} parallel on each: {figures}")


def _print_turns(run: dict) -> None:
    """A multi-turn run's figures by turn: hit rate (and the ideal: every earlier turn cached), TTFT."""
    if run["turns"] < 2:
        return

    def figures(values, fmt):
        return " ".join("-" if v is None or v != v else fmt.format(v) for v in values)

    print(f"{run['configuration']}, {run['parallel']} parallel, by turn:")
    print(f"  KV hit rate        {figures(run['kv_hit_rate_by_turn'], '{:.3f}')}")
    print(f"  ideal KV hit rate  {figures(run['kv_hit_rate_ideal_by_turn'], '{:.3f}')}")
    print(f"  TTFT p50 s         {figures(run['ttft_p50_by_turn_s'], '{:.2f}')}")
    print(
        f"  evictions {run['evictions']}, preemptions {run['preemptions']}; RAM tier: {run['ram_saves']} saved, "
        f"{run['ram_restores']} restored ({run['ram_restored_tokens']} tokens)"
    )


def _serve(args) -> int:
    from .default_model import default_model_path
    from .engine.model_file import check_gguf_file
    from .server.protocol import Thinking
    from .server.run import serve

    paths = args.serve_models or [default_model_path()]
    if len(args.aliases) > len(paths):
        raise ValueError(f"{len(args.aliases)} aliases for {len(paths)} models: give --alias once per --model at most")
    for path in paths:
        check_gguf_file(path)
    config = EngineConfig(model_path="", n_batch=max(args.batch, args.parallel), capacity=args.parallel)
    config = config.with_(**args.engine_overrides)
    aliases = args.aliases + [None] * (len(paths) - len(args.aliases))
    models = [
        (config.with_(model_path=path) if i == 0 else config.for_other_model(path), alias)
        for i, (path, alias) in enumerate(zip(paths, aliases))
    ]
    budget = None if args.reasoning_budget == -1 else args.reasoning_budget
    thinking = Thinking(args.reasoning_format != "none", budget, args.chat_template_kwargs)
    options = {
        "allow_origins": args.allow_origins,
        "allow_hosts": args.allow_hosts,
        "store_mb": args.responses_store_mb,
        "thinking": thinking,
        "allow_image_urls": args.allow_image_urls,
    }
    return asyncio.run(serve(models, args.host, args.port, args.api_key, args.max_queue, **options))


def _print_perf_lines(run: dict) -> None:
    for r in run["requests"]:
        rate = "-" if math.isnan(r["kv_hit_rate"]) else f"{r['kv_hit_rate']:.2f}"
        print(
            f"perf conv={r['conversation']} turn={r['turn']} prompt={r['prompt_tokens']} "
            f"cached={r['cached_tokens']} evaluated={r['evaluated_tokens']} gen={r['gen_tokens']} "
            f"ttft={1000 * r['ttft_s']:.0f}ms kv cache hit rate={rate} conversation hit rate={r['conversation_hit_rate']:.2f}",
            file=sys.stderr,
        )
    print(f"perf evictions={run['evictions']} preemptions={run['preemptions']}", file=sys.stderr)


def _without_nan(value):
    """JSON has no NaN: a figure that does not exist (no second token, say) is written as null."""
    if isinstance(value, float) and math.isnan(value):
        return None
    if isinstance(value, dict):
        return {k: _without_nan(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_without_nan(v) for v in value]
    return value
