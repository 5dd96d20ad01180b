from perfgate.cli import main

raise SystemExit(main())
