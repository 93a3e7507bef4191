"""ISS-SR outside its checkout: :mod:`.space` writes the folder a Hugging Face Space repository holds
(``python -m iss space export``), :mod:`.export` writes zoo models for spandrel/chaiNNer and ONNX Runtime
(``python -m iss export``)."""
