"""Local scale-out host: runs the app's indexed functions in N processes against Azurite."""
