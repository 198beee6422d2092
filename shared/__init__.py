"""Code shared by the app's functions: leases, the singleton decorator, run-once records."""
