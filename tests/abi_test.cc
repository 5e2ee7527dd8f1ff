// The shared object's ABI: soname, dependencies, and the exported symbol set, read from the
// ELF file itself; every function capi/cgc.h declares is exported and nothing else is.
#include <dlfcn.h>
#include <elf.h>
#include <gtest/gtest.h>

#include <cstring>
#include <cstddef>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "capi/cgc.h"
#include "tests/test_data.h"

namespace {

struct ElfInfo {
  std::string soname;
  std::vector<std::string> needed;
  std::set<std::string> exported;  // defined global/weak dynamic symbols
};

bool ReadElf(const std::string& path, ElfInfo* out, std::string* err) {
  std::ifstream f(path, std::ios::binary);
  if (!f) {
    *err = "cannot open " + path;
    return false;
  }
  std::vector<char> bytes((std::istreambuf_iterator<char>(f)), std::istreambuf_iterator<char>());
  if (bytes.size() < sizeof(Elf64_Ehdr) || std::memcmp(bytes.data(), ELFMAG, SELFMAG) != 0 ||
      bytes[EI_CLASS] != ELFCLASS64) {
    *err = path + " is not a 64-bit ELF file";
    return false;
  }
  const auto* eh = reinterpret_cast<const Elf64_Ehdr*>(bytes.data());
  const auto* sh = reinterpret_cast<const Elf64_Shdr*>(bytes.data() + eh->e_shoff);
  for (int i = 0; i < eh->e_shnum; i++) {
    const Elf64_Shdr& s = sh[i];
    const char* strtab = bytes.data() + sh[s.sh_link].sh_offset;
    if (s.sh_type == SHT_DYNSYM) {
      const auto* sym = reinterpret_cast<const Elf64_Sym*>(bytes.data() + s.sh_offset);
      for (size_t k = 0; k < s.sh_size / sizeof(Elf64_Sym); k++) {
        int bind = ELF64_ST_BIND(sym[k].st_info);
        if (sym[k].st_shndx == SHN_UNDEF || (bind != STB_GLOBAL && bind != STB_WEAK)) continue;
        out->exported.insert(strtab + sym[k].st_name);
      }
    } else if (s.sh_type == SHT_DYNAMIC) {
      const auto* dyn = reinterpret_cast<const Elf64_Dyn*>(bytes.data() + s.sh_offset);
      for (size_t k = 0; k < s.sh_size / sizeof(Elf64_Dyn) && dyn[k].d_tag != DT_NULL; k++) {
        if (dyn[k].d_tag == DT_NEEDED) out->needed.push_back(strtab + dyn[k].d_un.d_val);
        if (dyn[k].d_tag == DT_SONAME) out->soname = strtab + dyn[k].d_un.d_val;
      }
    }
  }
  return true;
}

// Every function of the function table (capi/cgc_api.h's list, which the library's build checks
// against capi/cgc.h's prototypes), plus the table's getter.
std::set<std::string> DeclaredFunctions() {
#define NAME_(ret, name, params) #name,
  std::set<std::string> names = {CGC_API_FUNCTIONS(NAME_) "cgc_get_api"};
#undef NAME_
  return names;
}

class Abi : public ::testing::Test {
 protected:
  void SetUp() override {
    std::string err;
    ASSERT_TRUE(ReadElf(cgc_test::DataPath("libcgc.so"), &elf_, &err)) << err;
  }
  ElfInfo elf_;
};

TEST(AbiHeader, ListsEveryContractFunctionOnce) {
  std::set<std::string> declared = DeclaredFunctions();
  // 1.0: 63 functions and cgc_get_api; 1.1 appended 29, 1.2 four, 1.3 one, 1.4 three, 1.5 two,
  // 1.6 ten.
  EXPECT_EQ(declared.size(), 64u + 29u + 4u + 1u + 3u + 2u + 10u);
  EXPECT_TRUE(declared.count("cgc_graph_launch"));
  EXPECT_EQ(sizeof(cgc_api_t), sizeof(size_t) + (63 + 29 + 4 + 1 + 3 + 2 + 10) * sizeof(void (*)()));
  EXPECT_EQ(offsetof(cgc_api_t, cgc_graph_kernel_node_set_enabled), sizeof(size_t) + (63 + 29) * sizeof(void (*)()))
      << "1.2's functions start right after 1.1's";
  EXPECT_EQ(offsetof(cgc_api_t, cgc_capture_conditional_begin_bodies), sizeof(size_t) + (63 + 29 + 4) * sizeof(void (*)()))
      << "1.3's function comes right after 1.2's";
  EXPECT_EQ(offsetof(cgc_api_t, cgc_pool_adopt_capture), sizeof(size_t) + (63 + 29 + 4 + 1) * sizeof(void (*)()))
      << "1.4's functions start right after 1.3's";
  EXPECT_EQ(offsetof(cgc_api_t, cgc_record_stream_native), sizeof(size_t) + (63 + 29 + 4 + 1 + 2) * sizeof(void (*)()))
      << "1.4's last function comes before 1.5's";
  EXPECT_EQ(offsetof(cgc_api_t, cgc_nccl_pool_create), sizeof(size_t) + (63 + 29 + 4 + 1 + 3) * sizeof(void (*)()))
      << "1.5's functions start right after 1.4's";
  EXPECT_EQ(offsetof(cgc_api_t, cgc_pool_malloc), sizeof(size_t) + (63 + 29 + 4 + 1 + 3 + 1) * sizeof(void (*)()))
      << "1.5's last function comes before 1.6's";
  EXPECT_EQ(offsetof(cgc_api_t, cgc_last_status), sizeof(size_t) + (63 + 29 + 4 + 1 + 3 + 2) * sizeof(void (*)()))
      << "1.6's functions start right after 1.5's";
  EXPECT_EQ(offsetof(cgc_api_t, cgc_memory_snapshot), sizeof(size_t) + (63 + 29 + 4 + 1 + 3 + 2 + 1) * sizeof(void (*)()));
  EXPECT_EQ(offsetof(cgc_api_t, cgc_graph_share_executable), sizeof(size_t) + (63 + 29 + 4 + 1 + 3 + 2 + 8) * sizeof(void (*)()));
  EXPECT_EQ(offsetof(cgc_api_t, cgc_module_record), sizeof(size_t) + (63 + 29 + 4 + 1 + 3 + 2 + 9) * sizeof(void (*)()))
      << "1.6's last function ends the table";
  EXPECT_EQ(offsetof(cgc_capture_options_t, flags), 24u) << "1.0's capture options stay where they were";
  EXPECT_EQ(offsetof(cgc_api_t, struct_size), 0u);
  EXPECT_EQ(offsetof(cgc_api_t, cgc_version), sizeof(size_t)) << "docs/CONTRACT.md's order: versions first";
  // 1.0's table is a prefix of every later one: its last function stays where it was.
  EXPECT_EQ(offsetof(cgc_api_t, cgc_rng_set_state), sizeof(size_t) + 62 * sizeof(void (*)()));
  EXPECT_EQ(offsetof(cgc_api_t, cgc_stream_priority_range), sizeof(size_t) + 63 * sizeof(void (*)()))
      << "1.1's functions start right after 1.0's";
  EXPECT_EQ(offsetof(cgc_graph_info_t, pool_bytes_reserved), 32u) << "1.0's graph info fields stay where they were";
  EXPECT_EQ(offsetof(cgc_graph_info_t, kernel_nodes), 40u);
  // 1.6's snapshot structs: pointers and sizes first, their layout the same on every LP64 target.
  EXPECT_EQ(sizeof(cgc_segment_info_t), 8u * 8u);
  EXPECT_EQ(offsetof(cgc_segment_info_t, pool), 24u);
  EXPECT_EQ(offsetof(cgc_segment_info_t, small), 40u);
  EXPECT_EQ(offsetof(cgc_segment_info_t, first_block), 48u);
  EXPECT_EQ(sizeof(cgc_block_info_t), 32u);
  EXPECT_EQ(offsetof(cgc_block_info_t, state), 24u);
  EXPECT_EQ(sizeof(cgc_block_state_t), sizeof(int));
}

TEST_F(Abi, SonameIsLibcgcSo1) { EXPECT_EQ(elf_.soname, "libcgc.so.1"); }

TEST_F(Abi, NeedsNoCudaNcclOrCxxRuntime) {
  for (const std::string& lib : elf_.needed) {
    EXPECT_EQ(lib.find("libcuda"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("libcudart"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("libnccl"), std::string::npos) << lib;
    EXPECT_EQ(lib.find("libstdc++"), std::string::npos) << lib;
  }
}

TEST_F(Abi, ExportsExactlyTheDeclaredFunctions) {
  std::set<std::string> declared = DeclaredFunctions();
  for (const std::string& name : declared) EXPECT_TRUE(elf_.exported.count(name)) << name << " is not exported";
  for (const std::string& name : elf_.exported)
    EXPECT_TRUE(declared.count(name)) << name << " is exported but not declared in capi/cgc.h";
}

TEST_F(Abi, TheTableHoldsTheExportedFunctionsAndRefusesNewerVersions) {
  void* h = dlopen(cgc_test::DataPath("libcgc.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto get_api = reinterpret_cast<cgc_status_t (*)(uint32_t, const cgc_api_t**)>(dlsym(h, "cgc_get_api"));
  ASSERT_NE(get_api, nullptr);
  const cgc_api_t* api = nullptr;
  ASSERT_EQ(get_api(CGC_VERSION, &api), CGC_SUCCESS);
  ASSERT_NE(api, nullptr);
  EXPECT_EQ(api->struct_size, sizeof(cgc_api_t));
#define SAME_(ret, name, params) \
  EXPECT_EQ(reinterpret_cast<void*>(api->name), dlsym(h, #name)) << #name;
  CGC_API_FUNCTIONS(SAME_)
#undef SAME_
  const cgc_api_t* older = nullptr;
  EXPECT_EQ(get_api(CGC_VERSION_MAJOR << 16, &older), CGC_SUCCESS) << "an older minor version gets the table";
  EXPECT_EQ(older, api);
  const cgc_api_t* newer = api;
  EXPECT_EQ(get_api((CGC_VERSION_MAJOR << 16) | ((CGC_VERSION_MINOR + 1) << 8), &newer), CGC_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(newer, nullptr);
  EXPECT_EQ(get_api((CGC_VERSION_MAJOR + 1) << 16, &newer), CGC_ERROR_NOT_SUPPORTED);
  EXPECT_EQ(get_api(CGC_VERSION, nullptr), CGC_ERROR_INVALID_ARGUMENT);
  dlclose(h);
}

TEST_F(Abi, LoadsWithDlopenOnAnyMachine) {
  void* h = dlopen(cgc_test::DataPath("libcgc.so").c_str(), RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(h, nullptr) << dlerror();
  auto version = reinterpret_cast<uint32_t (*)()>(dlsym(h, "cgc_version"));
  ASSERT_NE(version, nullptr);
  EXPECT_EQ(version() >> 16, 1u);
  EXPECT_EQ(dlsym(h, "cgc__driver_load"), nullptr) << "internal symbols must stay hidden";
  EXPECT_EQ(dlsym(h, "cgc__drv"), nullptr);
  dlclose(h);
}

}  // namespace
