from iss.cli import main

raise SystemExit(main())
