"""The ``vllm`` command of sandbox instances whose image names vllm: serve the sandbox's model.

    $ vllm serve Qwen/Qwen2.5-VL-7B-Instruct --port 8000      # on the instance, over SSH

Like the real ``vllm serve``, it runs in the foreground and serves an OpenAI-compatible API on
the instance's port 8000 (the host port in ``$GPUCLOUD_PORT_8000``, which the instance's SSH
server forwards 8000 to). The model is the sandbox's own (see :mod:`gpucloud_nb.sandbox.inference`);
requests must send the key of ``--api-key`` (or ``$VLLM_API_KEY``), by default the sandbox's
public inference secret ``sandbox-secret``. It prints "Application startup complete." when ready.
"""

from __future__ import annotations

import argparse
import os
import sys

__all__ = ["main"]


def main(argv: list[str] | None = None) -> int:
    """Parse ``vllm serve MODEL [--port 8000] [--api-key KEY]`` and serve until killed."""
    parser = argparse.ArgumentParser(prog="vllm", description="The sandbox's vllm command.")
    commands = parser.add_subparsers(dest="command", required=True)
    serve = commands.add_parser("serve", help="Serve MODEL with an OpenAI-compatible API.")
    serve.add_argument("model")
    serve.add_argument("--port", type=int, default=8000)
    serve.add_argument("--host", default="0.0.0.0")
    serve.add_argument("--api-key", default=None)
    args, _ignored = serve.parse_known_args(argv[1:]) if argv and argv[:1] == ["serve"] \
        else (parser.parse_args(argv), [])
    host_port = os.environ.get("GPUCLOUD_PORT_8000")
    if args.port != 8000 or not host_port:
        print("vllm: in the sandbox only port 8000 of the instance can be served and forwarded; "
              "use --port 8000.", file=sys.stderr)
        return 2

    import uvicorn

    from gpucloud_nb.sandbox.config import DEFAULT_INFERENCE_SECRET, SandboxConfig
    from gpucloud_nb.sandbox.inference import create_inference_app

    key = args.api_key or os.environ.get("VLLM_API_KEY") or DEFAULT_INFERENCE_SECRET
    app = create_inference_app(SandboxConfig(inference_secret=key))
    print(f"INFO: vllm (gpucloud-nb sandbox) serving {args.model} on port 8000", flush=True)
    uvicorn.run(app, host="127.0.0.1", port=int(host_port), log_level="info")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
