#include "engine/loader.h"

// Filled in when the io readers and tokenizers land.
