"""The stand-in upstream, an OpenAI-compatible server to try semcache without a model or a key
(``python -m semcache.testing.standin_upstream``), and the thread it runs in inside a test. The
rest of the test tooling lives in the repository's ``testkit``, outside the package."""
