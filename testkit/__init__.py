"""What the tests and the benchmarks run semcache with: servers on loopback (in a thread or as a
process), a private redis-server, fakes behind the seams, the log secret scanner and a tiny model.
Part of the repository, not of the package; the stand-in upstream, which users run too, lives in
``semcache.testing``."""
