"""The HTTP fuzzer's parts (the runner and command line are ../fuzz_http.py):

    segments.py           segment bytes: varints, entries, zstd frames, the header, build and render
    requests.py           JSON with duplicates, Request and Response, sending, the operations and
                          botocore's serializer
    signing.py            SigV4 (botocore's), with the clock set off or the signature garbled
    valid_requests.py     the server state valid requests are built on (Context), valid requests
                          of Cognito Sync and /segments
    identity_requests.py  Cognito Identity (POST / with X-Amz-Target): its state, valid requests,
                          X-Amz-Target mutations
    surfaces.py           the surfaces and their weights; /devices, /messages, /events, /admin,
                          /ui and /streams/payload: their state and valid requests
    values.py             values at their limits and generators of odd values
    mutations.py          mutations of JSON, path, query, headers, signatures, tokens and bytes,
                          and `mutate`
    segment_mutations.py  mutations of segment bodies (entries, header fields, frames)
    fuzzer.py             Finding and Fuzzer: sending, findings, crash and hang triage, verify
"""
