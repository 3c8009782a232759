"""python -m rackready.report {build,summary,sign,verify,keygen,diff} — see cli.main."""

from rackready.report.cli import main

raise SystemExit(main())
