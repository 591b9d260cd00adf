from ansible_operator.cli import main

raise SystemExit(main())
