"""llama.cpp, through llama-cpp-python's low-level C API: the only package that imports llama_cpp.

`context.LlamaBackend` is a loaded model and its context; the modules beside it are its parts."""
