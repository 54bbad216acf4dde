"""The background-work runtime every part of the package stands on.

- `threads`: worker threads that interpreter exit never waits for (`DaemonExecutor`).
- `writer`: the background L0 writer that keeps captured turns off the user's answer.
- `breaker`: the short circuit breaker the memory tools use when the store stops answering.
- `failure`: the package's one failure policy (what raises, what degrades, and its log line).
- `async_api`: the `a*` twins of blocking calls, each built from its sync method in one line.
- `progress`: the progress bar of long operations.
- `process`: whether another process (a lease's or a lock's holder) is still running.

It imports only `errors` and `types` of this package, so every floor above may use it.
"""
