"""The model libraries' own output, routed through the process's logging.

diffusers and transformers each attach a stream handler of their own to their loggers and
draw tqdm progress bars ("Loading pipeline components…") on stderr, which is the worker's
log file. Those lines bypass the configured format: with `telemetry.log_format: json` a
log shipper met carriage returns and ANSI escapes between the JSON lines, on every start.
"""

from __future__ import annotations


def route_library_logs() -> None:
    """Progress bars off; the libraries' records go to the root logger's handler."""
    import diffusers.utils.logging as diffusers_logging
    import transformers.utils.logging as transformers_logging

    # Re-exported by huggingface_hub.utils without being declared so.
    from huggingface_hub.utils import disable_progress_bars  # type: ignore[attr-defined]

    for library in (diffusers_logging, transformers_logging):
        library.disable_progress_bar()
        library.disable_default_handler()
        library.enable_propagation()
    disable_progress_bars()
