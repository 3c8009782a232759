"""`python -m rackready_lab.redfish serve ...`: one lab BMC (started by lab.up).

`host-reboot NODE` is what a BMC runs after a ComputerSystem.Reset: it
power-cycles the lab node (its BIOS settings were already applied by the BMC).
"""

from __future__ import annotations

import argparse
import json
import signal
import sys
from pathlib import Path


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m rackready_lab.redfish")
    sub = parser.add_subparsers(dest="command", required=True)
    serve = sub.add_parser("serve", help="serve one BMC's Redfish tree over HTTPS")
    serve.add_argument("--state", required=True, type=Path, help="the BMC's state.json")
    serve.add_argument("--bind", required=True, help="address to listen on")
    serve.add_argument("--port", type=int, default=443, help="TCP port")
    serve.add_argument("--cert", required=True, type=Path, help="server certificate (PEM)")
    serve.add_argument("--key", required=True, type=Path, help="its private key (PEM)")
    serve.add_argument("--credentials", required=True, type=Path,
                       help="JSON file with the account's user and password")
    serve.add_argument("--node", help="lab node a ComputerSystem.Reset power-cycles and "
                       "whose CPU activity is the load Power and Thermal follow")
    reboot = sub.add_parser("host-reboot", help="power-cycle a lab node (after a BMC reset)")
    reboot.add_argument("node")
    args = parser.parse_args(argv)

    if args.command == "host-reboot":
        from rackready.errors import UserError
        from rackready_lab import lab

        try:
            lab.reboot(args.node, bmc=False)
        except UserError as exc:
            print(f"error: {exc}", file=sys.stderr)
            return 2
        return 0

    from .server import BmcService

    creds = json.loads(args.credentials.read_text())
    on_reset = ([sys.executable, "-m", "rackready_lab.redfish", "host-reboot", args.node]
                if args.node else None)
    service = BmcService(args.state, args.bind, args.port, args.cert, args.key,
                         creds["user"], creds["password"], on_reset, node=args.node)
    signal.signal(signal.SIGTERM, lambda *_: service.stop())
    print(f"lab BMC on https://{args.bind}:{args.port}/redfish/v1 ({args.state})",
          file=sys.stderr, flush=True)
    service.serve()
    return 0


if __name__ == "__main__":
    sys.exit(main())
