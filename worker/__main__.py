"""`python -m worker`: run one worker from its environment (plain-interpreter start)."""

import sys

from kanban.worker.main import main

sys.exit(main())
