"""The HTTP fuzzer's parts (the runner and command line are ../fuzz_http.py):

    segments.py           segment bytes: varints, entries, zstd frames, the header, build and render
    requests.py           JSON with duplicates, Request and Response, SigV4 signing and sending,
                          the operations and botocore's serializer
    valid_requests.py     the server state valid requests are built on (Context), valid requests
    values.py             values at their limits and generators of odd values
    mutations.py          mutations of JSON, path, query, headers and bytes, and `mutate`
    segment_mutations.py  mutations of segment bodies (entries, header fields, frames)
    fuzzer.py             Finding and Fuzzer: sending, findings, crash and hang triage, verify
"""
