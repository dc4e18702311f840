import sys

from grpo_trainer.export.cli import main

sys.exit(main())
