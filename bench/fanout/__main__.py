"""``python -m bench.fanout``: bench/fanout/rows.py."""
import sys

from bench.fanout.rows import main

sys.exit(main())
