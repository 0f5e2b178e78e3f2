#include "mpi_tuning.h"

#include <mpi.h>

#include <cstdlib>
#include <string>
#include <vector>

namespace tp::mpi {

namespace {

struct Choice {
  const char* variable;        // the control variable's MPI_T name
  const char* value;           // the name of the choice
  const char* environment[3];  // where a user sets it (nullptr: no more)
};

// The rows of the table in the header: the variable of the MPI library not in use does not exist,
// and is skipped.
constexpr Choice kChoices[] = {
    {"MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM",
     "sched_pairwise",
     {"MPIR_CVAR_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM",
      "MPICH_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM",
      "MPIR_PARAM_IREDUCE_SCATTER_BLOCK_INTRA_ALGORITHM"}},
    {"coll_libnbc_iallreduce_algorithm",
     "ring",
     {"OMPI_MCA_coll_libnbc_iallreduce_algorithm", nullptr, nullptr}},
};

bool set_in_environment(const Choice& c) {
  for (const char* name : c.environment)
    if (name != nullptr && std::getenv(name) != nullptr) return true;
  return false;
}

// MPI_T is initialised once and stays so until MPI_Finalize: MPICH 4.0.2 cannot initialise it a
// second time after MPI_T_finalize (the variables' names are gone, MPI_T_cvar_get_num crashes),
// which would break any later user of the tool interface in this process (a profiler, a test).
// It asks for the thread level MPI already runs at: Open MPI 4.1 takes MPI_T_init_thread's level
// as the process's own, so asking for MPI_THREAD_SINGLE after MPI_Init_thread(MULTIPLE) made
// MPI_Query_thread answer SINGLE from then on (every communicator made later ran without its
// progress thread, and MPI stopped guarding itself for the one already running).
bool tool_interface() {
  static const bool ok = [] {
    int initialized = 0, level = MPI_THREAD_SINGLE, provided = 0;
    MPI_Initialized(&initialized);
    if (initialized) MPI_Query_thread(&level);
    return MPI_T_init_thread(level, &provided) == MPI_SUCCESS;
  }();
  return ok;
}

// Writes `value` into the int variable `name` if it is at its default (0); true when written.
bool write_choice(const std::string& name, const char* value) {
  AlgorithmVariable v;
  if (!read_algorithm_variable(name, v) || v.value != 0) return false;
  const int wanted = choice_value(v, value);
  if (wanted <= 0) return false;
  MPI_T_cvar_handle handle;
  int count = 0;
  if (MPI_T_cvar_handle_alloc(v.index, nullptr, &handle, &count) != MPI_SUCCESS) return false;
  const bool ok = count == 1 && MPI_T_cvar_write(handle, &wanted) == MPI_SUCCESS;
  MPI_T_cvar_handle_free(&handle);
  return ok;
}

std::string apply() {
  std::string done;
  for (const Choice& c : kChoices)
    if (!set_in_environment(c) && write_choice(c.variable, c.value))
      done += (done.empty() ? "" : " ") + std::string(c.variable) + "=" + c.value;
  return done;
}

}  // namespace

// Each choice is "<name><spaces> - <what it does>", one after the other (MPI_T gives them without
// line breaks): the text before the k-th " - " ends with the k-th name.
int algorithm_value(const std::string& description, const std::string& name) {
  int index = 0;
  for (size_t dash = description.find(" - "); dash != std::string::npos;
       dash = description.find(" - ", dash + 3), ++index) {
    size_t end = dash;
    while (end > 0 && description[end - 1] == ' ') --end;
    if (end >= name.size() && description.compare(end - name.size(), name.size(), name) == 0)
      return index;
  }
  return -1;
}

int choice_value(const AlgorithmVariable& v, const std::string& name) {
  if (v.enumtype == MPI_T_ENUM_NULL) return algorithm_value(v.description, name);
  int items = 0, len = 0;
  char enum_name[256];
  len = sizeof enum_name;
  if (MPI_T_enum_get_info(v.enumtype, &items, enum_name, &len) != MPI_SUCCESS) return -1;
  for (int i = 0; i < items; ++i) {
    char item[256];
    int value = -1;
    len = sizeof item;
    if (MPI_T_enum_get_item(v.enumtype, i, &value, item, &len) == MPI_SUCCESS && name == item)
      return value;
  }
  return -1;
}

bool read_algorithm_variable(const std::string& name, AlgorithmVariable& out) {
  int index = -1;
  if (!tool_interface() || MPI_T_cvar_get_index(name.c_str(), &index) != MPI_SUCCESS) return false;
  char var[256], description[4096];
  int var_len = sizeof var, description_len = sizeof description, verbosity = 0, bind = 0,
      scope = 0;
  MPI_Datatype type = MPI_DATATYPE_NULL;
  MPI_T_enum enumtype = MPI_T_ENUM_NULL;
  if (MPI_T_cvar_get_info(index, var, &var_len, &verbosity, &type, &enumtype, description,
                          &description_len, &bind, &scope) != MPI_SUCCESS ||
      type != MPI_INT || bind != MPI_T_BIND_NO_OBJECT)
    return false;
  MPI_T_cvar_handle handle;
  int count = 0, value = -1;
  if (MPI_T_cvar_handle_alloc(index, nullptr, &handle, &count) != MPI_SUCCESS) return false;
  const bool ok = count == 1 && MPI_T_cvar_read(handle, &value) == MPI_SUCCESS;
  MPI_T_cvar_handle_free(&handle);
  if (!ok) return false;
  out.index = index;
  out.value = value;
  out.description = description;
  out.enumtype = enumtype;
  return true;
}

const std::string& tune_collectives() {
  static const std::string done = apply();
  return done;
}

}  // namespace tp::mpi
