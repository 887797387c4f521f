"""calengine's built-in plugins: learners, calibrators and combiners registered through entry points."""
