from ansible_operator_sandbox.cli import main

raise SystemExit(main())
